"""Secrets from the local ``.env`` to the host's 0600 ``~/.config/pippa/secrets.env``.

Why a file and stdin: a secret in argv shows in ``ps`` on both machines, in send-keys text it lands in
tmux scrollback. So the values travel only in a request on the host agent's stdin (``write_file``:
mode 0600 from the first byte, tmp + rename, a new directory 0700), and job scripts source the file.
Nothing here returns or prints a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values

from pippa_contract import verbs
from pippa_contract.secrets import SECRETS_PATH, format_secrets
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import validate_env_key


@dataclass(frozen=True)
class SecretsPush:
    """Names only, never values."""

    pushed: tuple[str, ...]
    missing: tuple[str, ...]  # named by the host's config but absent from the local .env
    path: str


def read_env(path: Path) -> dict[str, str]:
    """``KEY=value`` pairs of a dotenv file (empty when it does not exist); keys without a value dropped."""
    if not path.is_file():
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def secrets_file_text(values: dict[str, str]) -> str:
    """``KEY='value'`` lines a POSIX shell can source (pippa_contract.secrets; keys validated)."""
    for key in values:
        validate_env_key(key)
    return format_secrets(values)


def push_secrets(
    transport: Transport, names: tuple[str, ...], env_path: Path, optional: tuple[str, ...] = ()
) -> SecretsPush:
    """Send the named variables of ``env_path`` to the host's secrets file (rewritten each time);
    ``optional`` ones (PIPPA_NOTIFY) travel when set (not empty) and are not reported missing when not."""
    local = read_env(env_path)
    chosen = {n: local[n] for n in names if n in local}
    chosen.update({n: local[n] for n in optional if local.get(n)})
    missing = tuple(n for n in names if n not in local)
    verbs.write_file(agent_client.Once(transport), SECRETS_PATH, secrets_file_text(chosen), mode=0o600)
    return SecretsPush(pushed=tuple(sorted(chosen)), missing=missing, path=SECRETS_PATH)
