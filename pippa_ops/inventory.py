"""Hosts: inventory entries, ~/.ssh/config aliases, bare addresses, and the host ``local``.

(API fixed here so the other core modules can code against it; loading is filled in by the
inventory/SSH work.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_REMOTE_DIR = "~/pippa"
DEFAULT_SECRETS = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "HF_TOKEN")
# Where `pippa up` writes the secrets (0600) on a host; job scripts source it. Outside the synced tree.
SECRETS_PATH = "~/.config/pippa/secrets.env"
LOCAL = "local"


@dataclass(frozen=True)
class HostSpec:
    """Everything pippa needs to reach a host and run the training code there."""

    name: str  # how the user named it (inventory key, ssh alias, address, or "local")
    address: str | None = None  # hostname/IP to connect to; None for local
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None
    remote_dir: str = DEFAULT_REMOTE_DIR  # for local: the repo root itself (no copy)
    python: str | None = None  # how the host runs training code; None: <remote_dir>/.venv/bin/python
    setup: tuple[str, ...] | None = None  # shell lines `up` runs after sync; None: uv sync --extra train
    env: dict[str, str] = field(default_factory=dict)  # extra non-secret variables (HF_HOME, ...)
    secrets: tuple[str, ...] = DEFAULT_SECRETS  # names pushed from the local .env
    source: str = "address"  # "inventory:<file>", "ssh_config", "address", "local"

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL
