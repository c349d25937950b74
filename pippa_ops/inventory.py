"""Hosts: inventory entries, ~/.ssh/config aliases, bare addresses, and the host ``local``.

Two inventory files: ``pippa.toml`` at the repo root (team hosts, committed; ``$PIPPA_INVENTORY``
names another file, which the tests use) and ``~/.config/pippa/hosts.toml`` (personal; its fields win
over the team's for the same host). Both hold ``[hosts.NAME]`` tables with the HostSpec fields.
``resolve`` turns whatever the user typed into a HostSpec, or raises UnknownHost with what is known.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from pippa_ops.errors import UnknownHost, UsageError
from pippa_ops.repo import repo_root
from pippa_ops.shell import NAME_RE, validate_env_key

if TYPE_CHECKING:
    import paramiko

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
    # Shell lines `up` runs after sync; None: hostprep.DEFAULT_SETUP (uv sync --extra train --extra gpu).
    setup: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra non-secret variables (HF_HOME, ...)
    secrets: tuple[str, ...] = DEFAULT_SECRETS  # names pushed from the local .env
    source: str = "address"  # "inventory:<file>", "ssh_config", "address", "local"

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL


_ADDRESS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,253}$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_STR_FIELDS = ("address", "user", "identity_file", "proxy_jump", "remote_dir", "python")
_FIELDS = (*_STR_FIELDS, "port", "setup", "env", "secrets")


def ssh_dir() -> Path:
    return Path.home() / ".ssh"


def known_hosts_path() -> Path:
    return ssh_dir() / "known_hosts"


def ssh_config_path() -> Path:
    return ssh_dir() / "config"


def team_inventory_path(repo: Path | None = None) -> Path:
    override = os.environ.get("PIPPA_INVENTORY")
    return Path(override) if override else (repo or repo_root()) / "pippa.toml"


def personal_inventory_path() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "pippa" / "hosts.toml"


def load_ssh_config() -> paramiko.SSHConfig:
    """~/.ssh/config as paramiko reads it (imported here: resolving ``local`` never needs it)."""
    from pippa_ops._paramiko import paramiko

    path = ssh_config_path()
    if not path.is_file():
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except Exception as e:  # paramiko raises assorted errors on a malformed file
        raise UsageError(f"cannot read {path}: {e}") from e


def ssh_aliases(config: paramiko.SSHConfig | None = None) -> list[str]:
    """Concrete ``Host`` names of ~/.ssh/config (patterns and negations left out)."""
    names = (config or load_ssh_config()).get_hostnames()
    return sorted(n for n in names if not any(c in n for c in "*?!"))


def _read_file(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read inventory {path}: {e}") from e
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        raise UsageError(f"{path}: [hosts] must be a table of [hosts.NAME] tables")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in hosts.items():
        if not NAME_RE.fullmatch(name) or name == LOCAL:
            raise UsageError(f"{path}: invalid host name {name!r}")
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: hosts.{name} must be a table")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            known = ", ".join(_FIELDS)
            raise UsageError(f"{path}: hosts.{name}: unknown key {unknown[0]!r} (known: {known})")
        out[name] = {**entry, "_file": str(path)}
    return out


def _spec_from_entry(name: str, entry: Mapping[str, Any]) -> HostSpec:
    where = f"{entry['_file']}: hosts.{name}"

    def text(key: str) -> str | None:
        value = entry.get(key)
        if value is not None and not (isinstance(value, str) and value):
            raise UsageError(f"{where}.{key} must be a non-empty string")
        return value

    port = entry.get("port")
    if port is not None and not (isinstance(port, int) and 0 < port < 65536):
        raise UsageError(f"{where}.port must be a port number")
    setup = entry.get("setup")
    if isinstance(setup, str):
        setup = [setup]
    if setup is not None and not (isinstance(setup, list) and all(isinstance(x, str) for x in setup)):
        raise UsageError(f"{where}.setup must be a string or a list of strings")
    env = entry.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise UsageError(f"{where}.env must be a table of strings")
    for key in env:
        validate_env_key(key)
    secrets = entry.get("secrets", list(DEFAULT_SECRETS))
    if not (isinstance(secrets, list) and all(isinstance(x, str) for x in secrets)):
        raise UsageError(f"{where}.secrets must be a list of variable names")
    for key in secrets:
        validate_env_key(key)
    address = text("address") or name
    _check_address(address, where)
    user = text("user")
    if user is not None and not _USER_RE.fullmatch(user):
        raise UsageError(f"{where}.user: invalid user name {user!r}")
    return HostSpec(
        name=name,
        address=address,
        user=user,
        port=port,
        identity_file=text("identity_file"),
        proxy_jump=text("proxy_jump"),
        remote_dir=text("remote_dir") or DEFAULT_REMOTE_DIR,
        python=text("python"),
        setup=tuple(setup) if setup is not None else None,
        env=dict(env),
        secrets=tuple(secrets),
        source=f"inventory:{entry['_file']}",
    )


def _check_address(address: str, where: str) -> None:
    if not _ADDRESS_RE.fullmatch(address):
        raise UsageError(f"{where}: invalid address {address!r}")


def load_inventory(repo: Path | None = None) -> dict[str, HostSpec]:
    """Team and personal inventories merged field by field (personal wins), sorted by name."""
    team = _read_file(team_inventory_path(repo))
    personal = _read_file(personal_inventory_path())
    merged: dict[str, dict[str, Any]] = {}
    for name in sorted(set(team) | set(personal)):
        merged[name] = {**team.get(name, {}), **personal.get(name, {})}
    return {name: _spec_from_entry(name, entry) for name, entry in merged.items()}


def local_spec(repo: Path | None = None) -> HostSpec:
    """The host ``local``: this machine, the repo root itself as remote_dir (no copy)."""
    return HostSpec(name=LOCAL, remote_dir=str(repo or repo_root()), source="local")


def resolve(name: str, repo: Path | None = None) -> HostSpec:
    """Inventory entry, ssh alias, ``user@address`` or bare address, or ``local``; else UnknownHost."""
    if name == LOCAL:
        return local_spec(repo)
    inventory = load_inventory(repo)
    if name in inventory:
        return inventory[name]
    config = load_ssh_config()
    aliases = ssh_aliases(config)
    if name in aliases:
        found = config.lookup(name)
        port = found.get("port")
        identity = found.get("identityfile")
        return HostSpec(
            name=name,
            address=found.get("hostname", name),
            user=found.get("user"),
            port=int(port) if port else None,
            identity_file=identity[0] if identity else None,
            proxy_jump=found.get("proxyjump"),
            source="ssh_config",
        )
    user, _, address = name.rpartition("@")
    looks_like_address = bool(user) or "." in address or ":" in address or address == "localhost"
    if looks_like_address and _ADDRESS_RE.fullmatch(address) and (not user or _USER_RE.fullmatch(user)):
        return HostSpec(name=name, address=address, user=user or None, source="address")
    known = [LOCAL, *inventory, *aliases]
    raise UnknownHost(
        f"unknown host {name!r}: not in the inventory (pippa.toml, ~/.config/pippa/hosts.toml), "
        f"not an alias in ~/.ssh/config, not an address; known: {', '.join(known)}"
    )
