"""Alarms that curves hide (docs/samples.md): computed from a run's metrics lines by one pure
function, ``raised``, which the trainer runs as it logs (it writes what it finds to ``alarms.json``,
the run record that ``ps``, the dashboard and the host's alerts read) and anything else can run on a
metrics file (``from_metrics``).

- ``no_learning_signal``: the share of groups whose rewards are all equal (TRL's
  ``frac_reward_zero_std``, our ``reward/frac_zero_std``) at or above ``zero_std_threshold`` for
  ``zero_std_steps`` logged steps in a row: the group advantage is zero, nothing is learned
  (Dr GRPO, Liu et al. 2025, and the team's notes: too low a temperature gives no spread).
- ``length_collapse``: the mean completion length over ``length_window`` steps below ``length_ratio``
  of its early value (the first ``length_window`` steps), or every completion truncated
  (``completions/clipped_ratio`` 1) for ``length_window`` steps in a row where early on some were not.
  Not where the cap is tiny by design (``length_cap``, the run's max_completion_length, at most
  ``TINY_CAP`` tokens: the answer is meant to fill it), nor where the answers are right: the mean
  reward over those steps above its early mean (a model that learned to answer shorter).
- ``reward_without_substance``: the evaluation accuracy fell ``substance_drop`` or more below its best
  while the mean reward since that best evaluation rose above the mean before it (a reward hack).

Standard library only (the agent ships it to hosts); thresholds come from the recipe's ``[alarms]``.
"""

from __future__ import annotations

import json
import os

from pippa_contract.rundir import ALARMS_JSON as ALARMS_JSON

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable

    Record = Dict[str, Any]

NO_LEARNING_SIGNAL = "no_learning_signal"
LENGTH_COLLAPSE = "length_collapse"
REWARD_WITHOUT_SUBSTANCE = "reward_without_substance"
KINDS = (NO_LEARNING_SIGNAL, LENGTH_COLLAPSE, REWARD_WITHOUT_SUBSTANCE)
# The documented defaults (training_core.config.AlarmsConfig holds the same values and their reasons).
DEFAULTS: dict[str, float] = {
    "zero_std_threshold": 0.9,
    "zero_std_steps": 10,
    "length_ratio": 0.5,
    "length_window": 10,
    "substance_drop": 0.1,
}
EVAL_KEYS = ("eval/accuracy", "mbpp_eval/pass_rate")
TINY_CAP = 16  # tokens: a length cap this small is the recipe's answer format (tiny: 1), not a collapse


def _num(rec: Record, key: str) -> float | None:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v)


def _series(records: list[Record], key: str) -> list[tuple[int, float]]:
    """(step, value) of the records that have a number under ``key``."""
    out = []
    for r in records:
        v = _num(r, key)
        if v is not None:
            out.append((int(r["step"]), v))
    return out


def _alarm(kind: str, since: int, message: str) -> Record:
    return {"kind": kind, "since": since, "message": message, "samples_step": since}


def no_learning_signal(steps: list[Record], threshold: float, window: int) -> Record | None:
    run = 0
    for i, rec in enumerate(steps):
        v = _num(rec, "reward/frac_zero_std")
        run = run + 1 if v is not None and v >= threshold else 0
        if window > 0 and run >= window:
            since = steps[i - run + 1]["step"]
            why = f"{run}+ steps with >= {threshold:.0%} of groups rewarded all alike (no advantage)"
            return _alarm(NO_LEARNING_SIGNAL, since, f"{why} since step {since}")
    return None


def _improved(steps: list[Record], window: int, since: int, until: int) -> bool:
    """The mean reward over the steps ``since``..``until`` above the first ``window`` steps' mean."""
    rewards = _series(steps, "reward/mean")
    early = [v for _, v in rewards[:window]]
    late = [v for s, v in rewards if since <= s <= until]
    return bool(early and late) and sum(late) / len(late) > sum(early) / len(early)


def length_collapse(
    steps: list[Record], ratio: float, window: int, cap: float | None = None
) -> Record | None:
    if cap is not None and 0 < cap <= TINY_CAP:
        return None  # the answer format fills the cap by design
    window = max(1, int(window))
    found = _length_collapse(steps, ratio, window)
    if found is not None and _improved(steps, window, int(found["since"]), int(found.pop("_until"))):
        return None  # the answers got better as they got shorter: learning, not a collapse
    return found


def _length_collapse(steps: list[Record], ratio: float, window: int) -> Record | None:
    lengths = _series(steps, "completions/mean_length")
    if len(lengths) >= 2 * window:
        early = sum(v for _, v in lengths[:window]) / window
        for i in range(window, len(lengths) - window + 1):
            mean = sum(v for _, v in lengths[i : i + window]) / window
            if early > 0 and mean < ratio * early:  # it began at the window's first short step
                since = next(s for s, v in lengths[i : i + window] if v < ratio * early)
                return {
                    **_alarm(
                        LENGTH_COLLAPSE,
                        since,
                        f"mean completion length {mean:.1f} over {window} "
                        f"steps from step {since}, under {ratio:g}x its early {early:.1f}",
                    ),
                    "_until": lengths[i + window - 1][0],
                }
    clipped = _series(steps, "completions/clipped_ratio")
    if len(clipped) < 2 * window or min(v for _, v in clipped[:window]) >= 0.999:
        return None  # every completion truncated from the start is the recipe's choice, not a collapse
    run = 0
    for i, (_, v) in enumerate(clipped):
        run = run + 1 if v >= 0.999 else 0
        if i >= window and run >= window:
            since = clipped[i - run + 1][0]
            return {
                **_alarm(
                    LENGTH_COLLAPSE,
                    since,
                    f"every completion truncated at the length cap for {run} steps since step {since}",
                ),
                "_until": clipped[i][0],
            }
    return None


def reward_without_substance(steps: list[Record], evals: list[Record], drop: float) -> Record | None:
    points = []
    for rec in evals:
        for key in EVAL_KEYS:
            v = _num(rec, key)
            if v is not None:
                points.append((rec["step"], v))
                break
    if len(points) < 2:
        return None
    best = max(range(len(points)), key=lambda i: (points[i][1], -i))
    best_step, best_acc = points[best]
    later = [(s, v) for s, v in points[best + 1 :] if v <= best_acc - drop]
    if not later:
        return None
    rewards = [(r["step"], _num(r, "reward/mean")) for r in steps]
    before = [v for s, v in rewards if v is not None and s <= best_step]
    after = [v for s, v in rewards if v is not None and best_step < s <= later[-1][0]]
    if not before or not after or sum(after) / len(after) <= sum(before) / len(before):
        return None
    since = later[0][0]
    return _alarm(
        REWARD_WITHOUT_SUBSTANCE,
        since,
        f"eval accuracy {later[-1][1]:.2f} is {drop:g}+ under "
        f"its best {best_acc:.2f} (step {best_step}) while the mean reward rose",
    )


def raised(steps: list[Record], evals: list[Record], settings: dict[str, Any] | None = None) -> list[Record]:
    """Every alarm the run's step and eval records raise, each once, at the step where it began:
    ``{"kind", "since", "message", "samples_step"}`` (samples_step: the sampled step to read is the
    first at or after it)."""
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in (settings or {}).items() if k in DEFAULTS and v is not None})
    cap = (settings or {}).get("length_cap")  # the run's max_completion_length, where known
    cap = float(cap) if isinstance(cap, (int, float)) else None
    found = [
        no_learning_signal(steps, float(cfg["zero_std_threshold"]), int(cfg["zero_std_steps"])),
        length_collapse(steps, float(cfg["length_ratio"]), int(cfg["length_window"]), cap),
        reward_without_substance(steps, evals, float(cfg["substance_drop"])),
    ]
    return [a for a in found if a is not None]


def from_metrics(path: str, settings: dict[str, Any] | None = None) -> list[Record]:
    """``raised`` over a metrics.jsonl file (the resume rule applied: points a resumed header redoes
    are forgotten)."""
    from pippa_contract.metrics import MetricsReader

    class Points(MetricsReader):
        def __init__(self) -> None:
            super().__init__()
            self.steps: list[Record] = []
            self.evals: list[Record] = []

        def on_header(self, rec: Record, keep: int) -> None:
            self.steps = [r for r in self.steps if r["step"] <= keep]
            self.evals = [r for r in self.evals if r["step"] <= keep]

        def on_step(self, step: int, rec: Record) -> None:
            self.steps.append(rec)

        def on_eval(self, step: int, rec: Record) -> None:
            self.evals.append(rec)

    reader = Points()
    reader.read_file(path)
    return raised(reader.steps, reader.evals, settings)


def read_alarms(path: str) -> list[Record]:
    """The alarms an ``alarms.json`` holds (``{"alarms": [...]}``); none when it is missing or torn."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return []
    alarms = data.get("alarms") if isinstance(data, dict) else None
    if not isinstance(alarms, list):
        return []
    return [a for a in alarms if isinstance(a, dict) and a.get("kind") in KINDS]


def write_alarms(path: str, alarms: Iterable[Record]) -> None:
    """``{"alarms": [...]}`` written atomically (tmp + fsync + rename): a reader sees all or none."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"alarms": list(alarms)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def warning(alarms: Iterable[Record]) -> str | None:
    """One short line for ``ps`` and the dashboard: the alarms' kinds and where they began."""
    parts = [f"{a['kind'].replace('_', ' ')} (step {a.get('since')})" for a in alarms]
    return "; ".join(parts) or None
