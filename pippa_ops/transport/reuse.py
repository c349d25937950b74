"""Whether this process runs its SSH commands on the connection keeper's kept connections.

A module of its own so that the CLI can say so at start-up without importing the keeper's client
(``transport.keeper_client``), which only a command that reaches a host needs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pippa_ops.transport.keeper_client import KeeperClient

_state = {"reuse": False, "spawn": False}
_keeper: list[KeeperClient] = []  # the composition root's client, made on first use


def configure(reuse: bool, *, spawn: bool = True) -> None:
    """Turn reuse on (the CLI) or off; ``spawn``: start an absent keeper when this process exits."""
    _state["reuse"], _state["spawn"] = reuse, spawn


def keeper() -> KeeperClient:
    """This process's connection-keeper client (``transport.keeper_client``)."""
    if not _keeper:
        from pippa_ops.transport.keeper_client import KeeperClient

        _keeper.append(KeeperClient())
    return _keeper[0]


def requested() -> bool:
    """On, and not turned off by ``PIPPA_NO_REUSE=1`` (read on every call: tests change it)."""
    return _state["reuse"] and not turned_off_by_env()


def turned_off_by_env() -> bool:
    """``PIPPA_NO_REUSE`` set to anything but empty or 0."""
    return os.environ.get("PIPPA_NO_REUSE", "") not in ("", "0")


def spawn() -> bool:
    return _state["spawn"]
