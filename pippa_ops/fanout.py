"""Run one function over many hosts in parallel; one bad host never stops the others."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pippa_ops.errors import PippaError

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


def fan_out(items: Sequence[K], fn: Callable[[K], R], max_workers: int = 16) -> dict[K, R | PippaError]:
    """``{item: fn(item)}`` computed in parallel; a PippaError becomes that item's value.

    Other exceptions are bugs and propagate. Order of the result follows ``items``.
    """
    if not items:
        return {}
    if len(items) == 1:  # no thread to start and wait for (one host is the common case)
        try:
            return {items[0]: fn(items[0])}
        except PippaError as e:
            return {items[0]: e}
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
        out: dict[K, R | PippaError] = {}
        for item, fut in zip(items, futures, strict=True):
            try:
                out[item] = fut.result()
            except PippaError as e:
                out[item] = e
        return out
