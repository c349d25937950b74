"""How long to wait before reconnecting to a host: one schedule for ``pippa logs -f`` and the dashboard."""

from __future__ import annotations

from collections.abc import Sequence

# Waits between reconnect attempts in seconds; the last one repeats.
RECONNECT_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def retry_delay(attempt: int, delays: Sequence[float] = RECONNECT_BACKOFF_S) -> float:
    """The wait before reconnect attempt ``attempt`` (0 = the first after a failure)."""
    return delays[min(max(attempt, 0), len(delays) - 1)]
