"""Where and as whom to connect to a host: its HostSpec completed from ~/.ssh/config, and ProxyJump hops.

Shared by the paramiko transport (``transport.ssh``), the connection keeper and ``ssh_argv`` (the
OpenSSH command line), so every path reaches the same address with the same user, port and keys.
Imports no paramiko itself: the ssh config comes from ``inventory.load_ssh_config``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pippa_ops.errors import UnknownHost
from pippa_ops.hosts.inventory import HostSpec, load_ssh_config, resolve

__all__ = ["Endpoint", "endpoint", "jump_host"]


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect: the HostSpec completed from ~/.ssh/config (spec fields win)."""

    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    proxy_jump: str | None

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files the key under: ``host`` on port 22, else ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def endpoint(spec: HostSpec) -> Endpoint:
    """Complete ``spec`` with what ~/.ssh/config says about its address (HostName, User, Port, ...)."""
    if spec.address is None:
        raise UnknownHost(f"host {spec.name!r} has no address")
    found = load_ssh_config().lookup(spec.address)
    identities = [spec.identity_file] if spec.identity_file else list(found.get("identityfile", []))
    port = spec.port or int(found.get("port", 22))
    proxy = spec.proxy_jump or found.get("proxyjump")
    return Endpoint(
        hostname=found.get("hostname", spec.address),
        port=port,
        user=spec.user or found.get("user"),
        identity_files=tuple(str(Path(p).expanduser()) for p in identities),
        proxy_jump=None if proxy in (None, "none") else proxy,
    )


def jump_host(chain: str) -> HostSpec:
    """The hop next to the target of a ProxyJump ``chain`` (``a,b``: through a, then b), itself
    reached through the hops before it; each hop is a host name or ``[user@]host[:port]``."""
    *before, last = [hop.strip() for hop in chain.split(",") if hop.strip()]
    user, _, rest = last.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:  # host:port (an IPv6 address has several colons)
        host, _, port_text = rest.partition(":")
        if not port_text.isdigit():
            raise UnknownHost(f"invalid ProxyJump hop {last!r}")
        port = int(port_text)
    spec = resolve(host)
    overrides: dict[str, object] = {"proxy_jump": ",".join(before) or None}
    if user:
        overrides["user"] = user
    if port is not None:
        overrides["port"] = port
    return replace(spec, **overrides)  # type: ignore[arg-type]
