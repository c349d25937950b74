"""The user's OpenSSH files: ~/.ssh/config (read by asyncssh's reader) and ~/.ssh/known_hosts.

In the transport layer because both the inventory (``hosts``) and the connection keeper read them,
and the keeper connects without knowing the inventory.

Why asyncssh's reader rather than ``ssh -G HOST``: both follow OpenSSH's rules (first value wins,
``IdentityFile`` accumulates, ``Include``, ``Match host/originalhost/user/exec``), but ``ssh -G``
prints every option with its default filled in, so the inventory could not tell the fields the file
sets for an alias (which win over the team's pippa.toml) from OpenSSH's defaults (which must not);
and it is a process per lookup where the reader is a parse in this one.
"""

from __future__ import annotations

import getpass
import glob
import os
import shlex
from pathlib import Path
from typing import Any, Protocol

from pippa_ops.errors import UsageError

__all__ = [
    "SSHConfig",
    "SSHConfigProvider",
    "SSHConfigSource",
    "known_hosts_path",
    "read_ssh_config",
    "ssh_aliases",
    "ssh_config_path",
    "ssh_dir",
]


class SSHConfigSource(Protocol):
    """~/.ssh/config as the inventory reads it: ``SSHConfig``, or the keeper's answers."""

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


# What a lookup answers, under the (lower-case) names the inventory and the endpoint read: the options
# as asyncssh's reader names them.
_FIELDS = {
    "hostname": "Hostname",
    "user": "User",
    "port": "Port",
    "identityfile": "IdentityFile",
    "proxyjump": "ProxyJump",
}


class SSHConfig:
    """~/.ssh/config: its ``Host`` names, and what it says for one host name (``lookup``)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._hostnames = _host_names(path, set()) if path is not None else set()

    def get_hostnames(self) -> set[str]:
        return set(self._hostnames)

    def lookup(self, hostname: str) -> dict[str, Any]:
        """The options the file sets for ``hostname`` (``hostname`` itself always there)."""
        found: dict[str, Any] = {"hostname": hostname}
        if self.path is None:
            return found
        from asyncssh.config import SSHClientConfig

        try:
            config = SSHClientConfig.load(
                None, [self.path], False, False, False, getpass.getuser(), (), hostname, ()
            )
        except (OSError, ValueError) as e:  # asyncssh's ConfigParseError is a ValueError
            raise UsageError(f"cannot read {self.path}: {e}") from e
        for key, option in _FIELDS.items():
            value = config.get(option)
            if value is not None:
                found[key] = list(value) if isinstance(value, list) else value
        return found


def _host_names(path: Path, seen: set[Path]) -> set[str]:
    """Every pattern of every ``Host`` line, following ``Include`` (relative to ~/.ssh, as OpenSSH)."""
    if path in seen:
        return set()
    seen.add(path)
    names: set[str] = set()
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from e
    for number, line in enumerate(lines, 1):
        try:
            words = shlex.split(line.replace("=", " ", 1), comments=True)
        except ValueError as e:
            raise UsageError(f"cannot read {path}: line {number}: {e}") from e
        if len(words) < 2:
            continue
        keyword = words[0].lower()
        if keyword == "host":
            names.update(words[1:])
        elif keyword == "include":
            for pattern in words[1:]:
                expanded = os.path.join(ssh_dir(), os.path.expanduser(pattern))
                for included in sorted(glob.glob(expanded)):
                    if os.path.isfile(included):
                        names |= _host_names(Path(included), seen)
    return names


def read_ssh_config() -> SSHConfig:
    """~/.ssh/config read in this process (an empty one when there is no file)."""
    path = ssh_config_path()
    return SSHConfig(path if path.is_file() else None)


def ssh_aliases(config: SSHConfigSource) -> list[str]:
    """Concrete ``Host`` names of ~/.ssh/config (patterns and negations left out)."""
    names = config.get_hostnames()
    return sorted(n for n in names if not any(c in n for c in "*?!"))
