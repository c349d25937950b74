"""The connection keeper's requests as typed messages: one class per op, one table to parse them by.

A client sends one request (``wire.REQUEST``, JSON with an ``op``); the keeper parses it with
``parse`` into one of these and dispatches on its type (``keeper.Keeper.HANDLERS``). Both sides build
and read requests only through these classes, so a new op is a class here and a handler there.
Imports no asyncssh (a warm command imports this module).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.keeper.wire import ProtocolError


@dataclass(frozen=True)
class Op:
    """A request to the keeper; ``op`` names it on the wire."""

    op: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, **asdict(self)}


@dataclass(frozen=True)
class Ping(Op):
    """Is a keeper there? Answer: ``{"pid"}``."""

    op: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Status(Op):
    """What it holds. Answer: ``{"pid", "persist_s", "hosts": [{key, name, connections, commands,
    ahead_used, reused, busy, idle_s}]}``."""

    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class Shutdown(Op):
    """Close every connection and exit. Answer: ``{"closed"}`` (connections it had)."""

    op: ClassVar[str] = "shutdown"


@dataclass(frozen=True)
class SshConfig(Op):
    """~/.ssh/config as the keeper reads it, and the lookups of ``addresses`` with it.
    Answer: ``{"hostnames": [...], "lookups": {name: {...}}}``."""

    op: ClassVar[str] = "ssh_config"
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class SshLookup(Op):
    """One ~/.ssh/config lookup. Answer: ``{"lookup": {...}}``."""

    op: ClassVar[str] = "ssh_lookup"
    name: str = ""


@dataclass(frozen=True)
class Home(Op):
    """The host user's home directory (connecting when needed). Answer: ``{"home"}``."""

    op: ClassVar[str] = "home"
    host: dict[str, Any] = field(default_factory=dict)  # Endpoint.as_json of the command's host
    accept_new: bool = False

    @property
    def endpoint(self) -> Endpoint:
        return endpoint_of(self.host)


@dataclass(frozen=True)
class Exec(Op):
    """Run ``command`` on the host and relay it (frames S, O, R, X). ``ahead``: the command is the host
    agent's, which the keeper may have started ahead or kept from an earlier client (``Lend``)."""

    op: ClassVar[str] = "exec"
    host: dict[str, Any] = field(default_factory=dict)
    accept_new: bool = False
    command: str = ""
    ahead: bool = False

    @property
    def endpoint(self) -> Endpoint:
        return endpoint_of(self.host)


Request = Ping | Status | Shutdown | SshConfig | SshLookup | Home | Exec
OPS: dict[str, type[Op]] = {cls.op: cls for cls in (Ping, Status, Shutdown, SshConfig, SshLookup, Home, Exec)}


def endpoint_of(data: Any) -> Endpoint:
    """The endpoint the command resolved (``Endpoint.as_json``): the keeper connects where it says."""
    try:
        return Endpoint.from_json(data)
    except ValueError as e:
        raise ProtocolError("bad host") from e


def parse(data: dict[str, Any]) -> Op:
    """The typed request of a JSON request; ProtocolError for an unknown op or a field of a wrong type."""
    cls = OPS.get(str(data.get("op")))
    if cls is None:
        raise ProtocolError(f"unknown op {data.get('op')!r}")
    fields = {k: v for k, v in data.items() if k != "op"}
    try:
        if cls is SshConfig:
            addresses = fields.get("addresses", [])
            if not isinstance(addresses, list):
                raise TypeError("addresses")
            return SshConfig(tuple(str(a) for a in addresses))
        if cls is SshLookup:
            return SshLookup(str(fields["name"]))
        if cls is Home:
            return Home(dict(fields["host"]), bool(fields.get("accept_new")))
        if cls is Exec:
            return Exec(
                dict(fields["host"]),
                bool(fields.get("accept_new")),
                str(fields["command"]),
                bool(fields.get("ahead")),
            )
        return cls()
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"bad {cls.op} request") from e
