"""When a run counts as stalled: a threshold derived from the run's own step times.

Every supervised recipe run has a stall watch without a flag. Until the attempt's first step there is
none (model download, compilation and start-up never count); from then on the threshold is
``max(MULTIPLE x median step time, floor)`` once ``MIN_STEPS`` step intervals are known, and
``max(MULTIPLE x longest step so far, floor)`` before that (few samples, one of them may be the warm-up).
``--stall-timeout 20m`` fixes it, ``--stall-timeout off`` turns the watch off. The floor (5 minutes)
keeps a slow eval or checkpoint save between steps from reading as a hang; the environment variable
``PIPPA_STALL_FLOOR_S`` lowers it (tests).

Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Sequence

FLOOR_S = 300.0
FLOOR_ENV = "PIPPA_STALL_FLOOR_S"
MULTIPLE = 5.0
MIN_STEPS = 10
OFF = "off"
AUTO = "auto"


def floor_s(env: Mapping[str, str] | None = None) -> float:
    """The floor: FLOOR_S, or a positive PIPPA_STALL_FLOOR_S."""
    raw = (os.environ if env is None else env).get(FLOOR_ENV)
    try:
        value = float(raw) if raw else FLOOR_S
    except ValueError:
        return FLOOR_S
    return value if value > 0 else FLOOR_S


def intervals(step_times: Sequence[float]) -> list[float]:
    """Seconds between consecutive step lines (their ``time``), in order."""
    return [b - a for a, b in zip(step_times, step_times[1:]) if b >= a]


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def threshold(step_times: Sequence[float], setting: object, floor: float) -> float | None:
    """Seconds without a new metrics line after which the attempt is stalled; None: no watch now.

    ``step_times``: the ``time`` of each step line this attempt wrote; ``setting``: run.json's
    ``stall_timeout_s`` (a number: fixed; ``"off"``: none; None or ``"auto"``: derived)."""
    if setting == OFF:
        return None
    if isinstance(setting, (int, float)) and not isinstance(setting, bool) and setting > 0:
        return float(setting)
    if not step_times:
        return None
    gaps = intervals(step_times)
    if len(gaps) >= MIN_STEPS:
        return max(MULTIPLE * median(gaps), floor)
    return max(MULTIPLE * max(gaps), floor) if gaps else floor


def describe(seconds: float) -> str:
    """``15m``, ``90s``, ``1h30m``: how ps and alerts say a stall's threshold."""
    s = round(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 and s < 600 else "")
    return f"{s // 3600}h" + (f"{(s % 3600) // 60}m" if (s % 3600) // 60 else "")


def reason(seconds: float, recipe: bool) -> str:
    """The stalled attempt's reason: ``no new metrics line for 15m``."""
    return f"no new {'metrics line' if recipe else 'output'} for {describe(seconds)}"
