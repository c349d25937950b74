"""Where and as whom to connect: a host resolved once (``hosts.endpoint`` builds it) and handed to
the transports, which then need nothing else to connect (no inventory, no ~/.ssh/config).

It crosses to the connection keeper as JSON (``as_json``/``from_json``), so the keeper connects to
exactly the address, user, keys and hops the command resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_HOPS = 8  # a longer ProxyJump chain is taken for a loop in ~/.ssh/config


@dataclass(frozen=True)
class Endpoint:
    """A host as the connection sees it: its HostSpec completed from ~/.ssh/config, hops resolved."""

    name: str  # the host as the user named it: errors and the keeper's status say it
    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    proxy_jump: str | None  # the ProxyJump chain as written (``ssh -J`` takes it as it is)
    jump: Endpoint | None = None  # the hop next to this host (reached through its own ``jump``)

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files the key under: ``host`` on port 22, else ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hostname": self.hostname,
            "port": self.port,
            "user": self.user,
            "identity_files": list(self.identity_files),
            "proxy_jump": self.proxy_jump,
            "jump": self.jump.as_json() if self.jump is not None else None,
        }

    @classmethod
    def from_json(cls, data: Any, depth: int = 0) -> Endpoint:
        """The endpoint ``as_json`` wrote; ValueError for anything else."""
        if depth > MAX_HOPS or not isinstance(data, dict):
            raise ValueError("bad endpoint")
        name, hostname, port = data.get("name"), data.get("hostname"), data.get("port")
        user, proxy_jump, identities = data.get("user"), data.get("proxy_jump"), data.get("identity_files")
        if not (isinstance(name, str) and name and isinstance(hostname, str) and hostname):
            raise ValueError("bad endpoint: name and hostname must be strings")
        if not (isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536):
            raise ValueError("bad endpoint: port")
        if not all(v is None or isinstance(v, str) for v in (user, proxy_jump)):
            raise ValueError("bad endpoint: user and proxy_jump must be strings")
        if not (isinstance(identities, list) and all(isinstance(p, str) for p in identities)):
            raise ValueError("bad endpoint: identity_files must be a list of strings")
        jump = data.get("jump")
        return cls(
            name=name,
            hostname=hostname,
            port=port,
            user=user,
            identity_files=tuple(identities),
            proxy_jump=proxy_jump,
            jump=None if jump is None else cls.from_json(jump, depth + 1),
        )
