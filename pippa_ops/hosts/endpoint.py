"""From a HostSpec to the Endpoint the transports connect to: the spec completed from ~/.ssh/config,
and its ProxyJump chain resolved hop by hop, once, before any connection.

Shared by a command's own connection, the connection keeper (which gets the endpoint as JSON) and
``ssh_argv`` (the OpenSSH command line), so every path reaches the same address with the same user,
port and keys. Imports no SSH library itself: the ssh config comes from ``inventory.load_ssh_config``,
and only when ~/.ssh/config exists.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pippa_ops.errors import UnknownHost
from pippa_ops.hosts.inventory import HostSpec, load_ssh_config, resolve, ssh_config_path
from pippa_ops.transport.endpoint import MAX_HOPS, Endpoint

__all__ = ["Endpoint", "endpoint", "jump_host", "target"]


def target(spec: HostSpec) -> Endpoint:
    """``spec`` completed with what ~/.ssh/config says about its address (HostName, User, Port, ...);
    its ProxyJump chain kept as written, not resolved (``ssh -J`` resolves it itself)."""
    if spec.address is None:
        raise UnknownHost(f"host {spec.name!r} has no address")
    # No ~/.ssh/config: a lookup would only echo the address back; skip it.
    found: dict[str, Any] = {}
    if ssh_config_path().is_file():
        found = dict(load_ssh_config().lookup(spec.address))
    identities = [spec.identity_file] if spec.identity_file else list(found.get("identityfile", []))
    proxy = spec.proxy_jump or found.get("proxyjump")
    return Endpoint(
        name=spec.name,
        hostname=found.get("hostname", spec.address),
        port=spec.port or int(found.get("port", 22)),
        user=spec.user or found.get("user"),
        identity_files=tuple(str(Path(p).expanduser()) for p in identities),
        proxy_jump=None if proxy in (None, "none") else proxy,
    )


def endpoint(spec: HostSpec) -> Endpoint:
    """``spec``'s endpoint with every ProxyJump hop resolved (each an Endpoint of its own)."""
    return _resolved(spec, 0)


def _resolved(spec: HostSpec, hops: int) -> Endpoint:
    ep = target(spec)
    if ep.proxy_jump is None:
        return ep
    if hops >= MAX_HOPS:
        raise UnknownHost(f"{spec.name}: ProxyJump goes through more than {MAX_HOPS} hops (a loop?)")
    return replace(ep, jump=_resolved(jump_host(ep.proxy_jump), hops + 1))


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
