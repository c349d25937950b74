"""Waiting for input on a few descriptors with ``poll``, not ``select``.

``select.select`` refuses any descriptor numbered 1024 or above (FD_SETSIZE), which a long-lived
process holding many connections (the keeper, a dashboard over many hosts) can reach. Standard
library only: the keeper's wire module uses it.
"""

from __future__ import annotations

import select

TYPE_CHECKING = False  # a warm command imports this module: typing's import costs it ~4 ms
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TypeVar

    T = TypeVar("T")

# readable data, a hang-up or an error all mean "a read will not block" (it returns data, EOF or raises)
_EVENTS = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


def readable(objs: Sequence[T], timeout_s: float | None) -> list[T]:
    """Those of ``objs`` (each a descriptor or has ``fileno()``) that a read would not block on, waiting
    up to ``timeout_s`` (None: without limit); an empty list when the time ran out."""
    poller = select.poll()
    by_fd: dict[int, T] = {}
    for obj in objs:
        fd = obj if isinstance(obj, int) else _fileno(obj)
        by_fd[fd] = obj
        poller.register(fd, _EVENTS)
    ms = None if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
    return [by_fd[fd] for fd, _ in poller.poll(ms)]


def _fileno(obj: Any) -> int:
    return int(obj.fileno())
