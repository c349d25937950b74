"""Training curves as values: a metrics.jsonl read whole, EMA smoothing, integer step ticks, and the
config keys in which runs differ. Pure functions shared by ``pippa compare`` and the dashboard.

Smoothing is TensorBoard's: an exponential moving average with its start-up bias divided out
(``ema / (1 - w**n)``), so the first points are not pulled toward zero.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pippa_contract.metrics import EVAL, STEP, MetricsReader

Points = tuple[tuple[int, float], ...]
DASH_SMOOTHING = 0.6  # the dashboard's `e` toggle; TensorBoard's default weight


@dataclass(frozen=True)
class Curves:
    """One run's metrics file: its config and recipe (first header), every numeric step and eval
    series by key, and how it ended. A resumed header drops the points past its step."""

    config: dict[str, Any] = field(default_factory=dict)
    recipe: str | None = None
    steps: dict[str, Points] = field(default_factory=dict)
    evals: dict[str, Points] = field(default_factory=dict)
    end: str | None = None

    def series(self, key: str) -> Points:
        return self.steps.get(key) or self.evals.get(key) or ()


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


class _CurvesReader(MetricsReader):
    """Every numeric series of a run; the config and recipe of its first header (a resumed header
    keeps them unless there were none)."""

    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, Any] = {}
        self.recipe: str | None = None
        self.tables: dict[str, dict[str, dict[int, float]]] = {STEP: {}, EVAL: {}}
        self.end: str | None = None

    def on_header(self, rec: dict[str, Any], keep: int) -> None:
        for table in self.tables.values():
            for points in table.values():
                for s in [s for s in points if s > keep]:
                    del points[s]
        self.end = None
        if keep < 0 or not self.config:
            found = rec.get("config")
            self.config = found if isinstance(found, dict) else {}
            self.recipe = rec.get("recipe")

    def on_step(self, step: int, rec: dict[str, Any]) -> None:
        self._points(self.tables[STEP], step, rec)

    def on_eval(self, step: int, rec: dict[str, Any]) -> None:
        self._points(self.tables[EVAL], step, rec)

    @staticmethod
    def _points(table: dict[str, dict[int, float]], step: int, rec: dict[str, Any]) -> None:
        for key, value in rec.items():
            v = _number(value)
            if v is not None and key not in ("step", "time"):
                table.setdefault(key, {})[step] = v

    def on_end(self, rec: dict[str, Any]) -> None:
        self.end = str(rec.get("status"))


def parse_metrics(data: bytes) -> Curves:
    """Read a metrics.jsonl (pippa_contract.metrics) whole; a torn last line is ignored."""
    reader = _CurvesReader()
    reader.feed(data)

    def frozen(table: dict[str, dict[int, float]]) -> dict[str, Points]:
        return {k: tuple(sorted(v.items())) for k, v in table.items() if v}

    return Curves(
        config=reader.config,
        recipe=reader.recipe,
        steps=frozen(reader.tables[STEP]),
        evals=frozen(reader.tables[EVAL]),
        end=reader.end,
    )


def ema(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's debiased exponential moving average; ``weight`` 0 returns the values."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1): {weight}")
    out, last = [], 0.0
    lo, hi = math.inf, -math.inf
    for n, v in enumerate(values, start=1):
        last = last * weight + (1.0 - weight) * v
        lo, hi = min(lo, v), max(hi, v)
        # an average of the values so far lies within them: clamping removes the rounding that made a
        # constant series read 1.0000000000000002 (and the plot's axis show it)
        out.append(min(hi, max(lo, last / (1.0 - weight**n))))
    return out


def smooth(points: Points, weight: float) -> Points:
    if weight <= 0.0 or not points:
        return points
    return tuple(zip((p[0] for p in points), ema([p[1] for p in points], weight), strict=True))


def integer_ticks(lo: float, hi: float, most: int = 6) -> list[int]:
    """At most ``most`` whole-number ticks (spacing 1, 2, 5 x 10^k) between ``lo`` and ``hi``: steps
    are integers, so an axis never reads 12.5."""
    first, last = math.ceil(lo), math.floor(hi)
    if last < first:
        return [round(lo)]

    def count(step: int) -> int:
        return last // step - math.ceil(first / step) + 1

    step = 1
    while count(step) > max(1, most):
        step = _next_step(step)
    start = math.ceil(first / step) * step
    return list(range(start, last + 1, step)) or [first]


def ticks_for_width(lo: float, hi: float, width: int) -> list[int]:
    """Integer ticks that fit ``width`` columns of a plot without their labels running together."""
    label = len(str(math.floor(abs(hi)))) + (1 if min(lo, hi) < 0 else 0)
    return integer_ticks(lo, hi, most=max(2, (width - 8) // (label + 3)))


def _next_step(step: int) -> int:
    """1, 2, 5, 10, 20, 50, ...: the next nice tick spacing."""
    mantissa, exp = step, 1
    while mantissa >= 10:
        mantissa //= 10
        exp *= 10
    return {1: 2, 2: 5, 5: 10}[mantissa] * exp


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config as dotted keys (``config.train.learning_rate``); lists stay whole values."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def config_diff(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Only the keys whose values differ between runs: key -> {run: value} (a run without the key
    shows None)."""
    flat = {run: flatten(cfg) for run, cfg in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    out = {}
    for key in keys:
        values = {run: f.get(key) for run, f in flat.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out[key] = values
    return out
