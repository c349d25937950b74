"""Whether this process runs its SSH commands on the connection keeper's kept connections, and the
process's one keeper client (its composition root, the CLI, turns reuse on).

A module of its own so that the CLI can say so at start-up without importing the keeper's client
(``transport.keeper.client``), which only a command that reaches a host needs. The arrow points one way:
this module imports the client when a command first needs it; the client never imports this module.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pippa_ops.transport.keeper.client import KeeperClient, KeptSSHConfig

_state = {"reuse": False, "spawn": False}
_keeper: list[KeeperClient] = []  # the composition root's client, made on first use


def configure(reuse: bool, *, spawn: bool = True) -> None:
    """Turn reuse on (the CLI) or off; ``spawn``: start an absent keeper when this process exits."""
    _state["reuse"], _state["spawn"] = reuse, spawn


def keeper() -> KeeperClient:
    """This process's connection-keeper client (``transport.keeper.client``)."""
    if not _keeper:
        from pippa_ops.transport.keeper.client import KeeperClient

        _keeper.append(KeeperClient(may_spawn=spawn, enabled=enabled))
    return _keeper[0]


def requested() -> bool:
    """On, and not turned off by ``PIPPA_NO_REUSE=1`` (read on every call: tests change it)."""
    return _state["reuse"] and not turned_off_by_env()


def enabled() -> bool:
    """Reuse asked for (``configure``), and a platform that can tell a socket peer's uid."""
    if not requested():
        return False
    return hasattr(socket, "SO_PEERCRED") or sys.platform == "darwin" or "bsd" in sys.platform


def turned_off_by_env() -> bool:
    """``PIPPA_NO_REUSE`` set to anything but empty or 0."""
    return os.environ.get("PIPPA_NO_REUSE", "") not in ("", "0")


def spawn() -> bool:
    return _state["spawn"]


# -- the process's client, for the CLI's keeper commands, the tests and the benches ----------------------
def forget() -> None:
    """Drop what the process's client learnt (broken keepers, cached answers)."""
    keeper().forget()


def kept_ssh_config(addresses: tuple[str, ...] = ()) -> KeptSSHConfig | None:
    return keeper().ssh_config(addresses)


def start(wait_s: float = 10.0) -> int | None:
    """Start this context's keeper (or find it running): its pid, None when it could not start."""
    return keeper().start(wait_s)


def status() -> dict[str, Any] | None:
    return keeper().status()


def disconnect() -> int | None:
    return keeper().disconnect()
