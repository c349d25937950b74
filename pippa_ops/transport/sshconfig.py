"""The user's OpenSSH files: ~/.ssh/config (parsed by paramiko) and ~/.ssh/known_hosts.

In the transport layer because both the inventory (``hosts``) and the connection keeper read them,
and the keeper connects without knowing the inventory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pippa_ops.errors import UsageError

if TYPE_CHECKING:
    import paramiko

__all__ = [
    "SSHConfigProvider",
    "SSHConfigSource",
    "known_hosts_path",
    "read_ssh_config",
    "ssh_aliases",
    "ssh_config_path",
    "ssh_dir",
]


class SSHConfigSource(Protocol):
    """~/.ssh/config as the inventory reads it: paramiko's ``SSHConfig``, or the keeper's answers."""

    def get_hostnames(self) -> set[str]: ...
    def lookup(self, hostname: str) -> dict[str, Any]: ...


class SSHConfigProvider(Protocol):
    """Something that can read ~/.ssh/config for this process (the connection keeper's client): the
    parsed config, or None when it cannot (then the inventory reads the file itself)."""

    def ssh_config(self, addresses: tuple[str, ...] = ()) -> SSHConfigSource | None: ...


def ssh_dir() -> Path:
    return Path.home() / ".ssh"


def known_hosts_path() -> Path:
    return ssh_dir() / "known_hosts"


def ssh_config_path() -> Path:
    return ssh_dir() / "config"


def read_ssh_config() -> paramiko.SSHConfig:
    """~/.ssh/config parsed by paramiko in this process."""
    from pippa_ops.transport._paramiko import paramiko

    path = ssh_config_path()
    if not path.is_file():
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except Exception as e:  # paramiko raises assorted errors on a malformed file
        raise UsageError(f"cannot read {path}: {e}") from e


def ssh_aliases(config: SSHConfigSource | paramiko.SSHConfig) -> list[str]:
    """Concrete ``Host`` names of ~/.ssh/config (patterns and negations left out)."""
    names = config.get_hostnames()
    return sorted(n for n in names if not any(c in n for c in "*?!"))
