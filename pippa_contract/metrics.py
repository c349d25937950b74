"""metrics.jsonl (docs/CONTRACTS.md): one incremental reader with the resume rule, the views the
laptop and the agent take of it, and the writer's rule for what a resume redoes.

Every reader of the file is a ``MetricsReader``: bytes in (a chunk may end inside a line: the
partial line waits for its newline), records out through ``on_header`` / ``on_step`` / ``on_eval`` /
``on_end``. A header's ``resume_point`` says what earlier points survive it: a first header
(``resumed_from_step`` null) keeps none, a resumed one keeps steps up to its ``resumed_from_step``.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent imports this module on the host, where typing costs ~5 ms
    from typing import Any, Dict

    Record = Dict[str, Any]

HEADER, STEP, EVAL, END = "header", "step", "eval", "end"
# End statuses of the end line; a run that is "diverged" also exits 1.
COMPLETED, FAILED, INTERRUPTED, DIVERGED = "completed", "failed", "interrupted", "diverged"
END_STATUSES = (COMPLETED, FAILED, INTERRUPTED, DIVERGED)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_line(raw: bytes) -> Record | None:
    """One line as a record; None for a torn or foreign line (never an error)."""
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def record_step(rec: Record) -> int | None:
    step = rec.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def resume_point(header: Record) -> int:
    """The last step a header keeps: its ``resumed_from_step``, or -1 (a fresh start keeps nothing)."""
    resumed = header.get("resumed_from_step")
    return resumed if isinstance(resumed, int) and not isinstance(resumed, bool) else -1


def redone(line: bytes, resumed_from_step: int) -> bool:
    """Writer side: does a resume from ``resumed_from_step`` redo this line (step and eval lines past
    it, every end line)? Foreign lines are not ours to judge and stay."""
    rec = parse_line(line)
    if rec is None:
        return False
    if rec.get("type") == END:
        return True
    step = record_step(rec)
    return rec.get("type") in (STEP, EVAL) and step is not None and step > resumed_from_step


class MetricsReader:
    """Reads metrics.jsonl incrementally; subclasses keep what they need of each record."""

    def __init__(self) -> None:
        self._buf = b""

    def restart(self) -> None:
        """The file will be read again from byte 0 (a resume replaced it): drop the partial line."""
        self._buf = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        for raw in lines:
            rec = parse_line(raw)
            if rec is not None:
                self.record(rec)

    def record(self, rec: Record) -> None:
        kind = rec.get("type")
        if kind == HEADER:
            self.on_header(rec, resume_point(rec))
        elif kind in (STEP, EVAL):
            step = record_step(rec)
            if step is not None:
                (self.on_step if kind == STEP else self.on_eval)(step, rec)
        elif kind == END:
            self.on_end(rec)

    def on_header(self, rec: Record, keep: int) -> None:
        """A header; forget points past ``keep`` (-1: all of them)."""

    def on_step(self, step: int, rec: Record) -> None:
        pass

    def on_eval(self, step: int, rec: Record) -> None:
        pass

    def on_end(self, rec: Record) -> None:
        pass

    def read_file(self, path: str) -> bool:
        """Feed a whole file; False when there is none."""
        try:
            with open(path, "rb") as f:
                self.feed(f.read())
        except OSError:
            return False
        return True


def header_max_steps(header: Record) -> int | None:
    """The run's planned steps (config.train.max_steps of its header), if it says."""
    node: object = header
    for key in ("config", "config", "train", "max_steps"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


class Summary(MetricsReader):
    """What `pippa runs` shows of a whole run: last step, final and best ``reward/mean``, the last
    eval line's metrics, the W&B run, how it ended, the planned steps."""

    def __init__(self) -> None:
        super().__init__()
        self.rewards: list[tuple[int, float]] = []
        self.evals: list[Record] = []
        self.recipe: Any = None
        self.wandb: Any = None
        self.last_step: int | None = None
        self.end: Record | None = None
        self.max_steps: int | None = None
        self.headers = 0

    def on_header(self, rec: Record, keep: int) -> None:
        self.headers += 1
        self.rewards = [p for p in self.rewards if p[0] <= keep]
        self.evals = [e for e in self.evals if e["step"] <= keep]
        self.end = None
        last = self.last_step
        self.last_step = min(last, keep) if last is not None and keep >= 0 else None
        self.recipe = rec.get("recipe", self.recipe)
        self.wandb = rec.get("wandb") or self.wandb
        self.max_steps = header_max_steps(rec)

    def on_step(self, step: int, rec: Record) -> None:
        self.last_step = step
        value = rec.get("reward/mean")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self.rewards.append((step, float(value)))

    def on_eval(self, step: int, rec: Record) -> None:
        self.evals.append(rec)

    def on_end(self, rec: Record) -> None:
        self.end = {k: rec.get(k) for k in ("status", "step", "error")}

    def as_dict(self) -> Record:
        best = max(self.rewards, key=lambda p: p[1]) if self.rewards else None
        last_eval = self.evals[-1] if self.evals else None
        out: Record = {
            "recipe": self.recipe,
            "wandb": self.wandb,
            "last_step": self.last_step,
            "end": self.end,
            "final_reward": self.rewards[-1][1] if self.rewards else None,
            "best_reward": best[1] if best else None,
            "best_step": best[0] if best else None,
            "eval": {k: v for k, v in last_eval.items() if k not in ("type", "time")} if last_eval else None,
        }
        if self.headers:
            out["max_steps"] = self.max_steps
        return out


def summarize(path: str) -> Record | None:
    """``Summary`` of the file at ``path``; None without one."""
    reader = Summary()
    return reader.as_dict() if reader.read_file(path) else None


def _time(rec: Record, before: float | None) -> float | None:
    t = rec.get("time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else before


class LastRecords(MetricsReader):
    """The last two step records and the end record when it is the last: what `pippa ps` shows,
    read from the file's tail (headers are not in it)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Record] = []
        self.end: Record | None = None
        self.newest: float | None = None  # the time of the last header or step record read

    def on_header(self, rec: Record, keep: int) -> None:
        self.newest = _time(rec, self.newest)

    def on_step(self, step: int, rec: Record) -> None:
        self.steps = [*self.steps[-1:], rec]
        self.end = None
        self.newest = _time(rec, self.newest)

    def begun_since(self, started: float | None) -> bool:
        """The trainer of the stretch that began at ``started`` (the run dir's ``started``, whole
        seconds) has written a line (its header or a step) and no end line after it: its start-up is
        over. A resumed run's older lines (before ``started``) do not count."""
        if started is None or self.end is not None or self.newest is None:
            return False
        return self.newest >= started

    def on_end(self, rec: Record) -> None:
        self.end = rec
