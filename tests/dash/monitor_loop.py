"""A host monitor's coroutines on an event loop in a thread of its own, as the dashboard runs them on
Textual's loop: for the tests of the monitor without an app."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from pippa_ops.monitor.host import HostMonitor


def start(mon: HostMonitor, emit: Callable[[object], None]) -> threading.Event:
    """Run ``mon.stream_gpus`` and ``mon.poll``; the event is set once both returned (after ``close``)."""
    ended = threading.Event()

    async def both() -> None:
        await asyncio.gather(mon.stream_gpus(emit), mon.poll(emit))

    def main() -> None:
        try:
            asyncio.run(both())
        finally:
            ended.set()

    threading.Thread(target=main, daemon=True, name=f"loop:{mon.name}").start()
    return ended
