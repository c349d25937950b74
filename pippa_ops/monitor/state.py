"""The dashboard's state model: what a host and a run look like on screen, the events that change
them, and the pure reducer and parsers that turn streamed bytes into that state.

Core (no textual/rich/typer, no IO): the same inputs always draw the same screen, so Pilot and
snapshot tests feed it directly. ``pippa_ops.monitor.host`` produces the events; the app folds them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pippa_contract.metrics import MetricsReader
from pippa_contract.states import ACTIVE
from pippa_contract.termsafe import screen_line
from pippa_ops.gpu import Gpu

HISTORY = 60  # samples kept per GPU for the sparklines (one minute at the default 1 s interval)
LOG_TAIL = 200  # lines of output.log kept for the run detail view
PLOTTED = ("reward/mean", "loss/total", "completions/mean_length", "grad/norm")
# The keys each slot draws, the first one a run logs: SFT and DPO runs sample nothing and fill the
# reward and length slots with their own curves; a self-play run's length slot shows its invalid moves.
SLOT_KEYS = {
    "reward/mean": ("reward/mean", "rewards/margins"),
    "completions/mean_length": (
        "game/invalid_rate",
        "completions/mean_length",
        "rewards/accuracies",
        "policy/token_accuracy",
    ),
}
# Fractions, drawn as points on the reward plot (self-play: wins and invalid-move losses vs random).
EVAL_PLOTTED = ("eval/accuracy", "mbpp_eval/pass_rate", "eval/vs_random/win", "eval/vs_random/invalid")
# The step's speed, newest value only (training_core.run.flops): the run view's perf line.
PERF_KEYS = ("perf/gen_share", "perf/gen_tokens_per_s", "perf/train_tokens_per_s", "perf/mfu", "perf/hfu")
_STEP_KEYS = tuple(dict.fromkeys((*PLOTTED, *(k for keys in SLOT_KEYS.values() for k in keys))))

Link = Literal["connecting", "up", "down"]


# ----------------------------------------------------------------------------------------------- state
@dataclass(frozen=True)
class GpuState:
    """A GPU as drawn: the latest reading plus short histories for the sparklines."""

    reading: Gpu
    util_history: tuple[float, ...] = ()  # percent, oldest first
    mem_history: tuple[float, ...] = ()  # percent of total, oldest first


@dataclass(frozen=True)
class RunRow:
    """One run in a host's run list (live tmux session or finished run directory)."""

    run_id: str
    what: str  # recipe name, or the command for a plain-command run
    state: str  # running / completed / failed / stopped / killed / ...
    session: str | None = None
    step: int | None = None
    last_reward: float | None = None
    elapsed_s: float | None = None
    cost: float | None = None  # so far, at the host's rate (pippa_ops.runs.records.cost); None: no rate
    currency: str | None = None  # the rate's currency (HostSpec.currency)


@dataclass(frozen=True)
class HostState:
    """Everything the dashboard shows about one host."""

    name: str
    link: Link = "connecting"
    reason: str | None = None  # why the host is down, one line
    retry_in_s: float | None = None  # when down: seconds until the next attempt
    gpus: tuple[GpuState, ...] | None = None  # None: not known yet; (): the host has no GPU
    gpu_note: str | None = None  # e.g. "no GPU (nvidia-smi not found)"
    sample_time: float | None = None  # host-side timestamp of the latest GPU sample (unix s)
    runs: tuple[RunRow, ...] = ()
    doctor: str | None = None  # the last `pippa doctor` verdict (ok / warn / fail); None: none known
    doctor_time: float | None = None  # when that doctor ran (the host's unix s)
    stop: dict[str, Any] | None = None  # the host's stop command as its alerts status says (monitor.looks)
    stop_read: float | None = None  # when that was read (laptop unix s): an armed stop's countdown


@dataclass(frozen=True)
class RunDetail:
    """The selected run: its curves, eval points, W&B link and the tail of its log."""

    host: str
    run_id: str
    series: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # key -> (step, value)
    evals: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # eval key -> points
    wandb_url: str | None = None
    end_status: str | None = None
    has_metrics: bool = False
    log_tail: tuple[str, ...] = ()
    perf: dict[str, float] = field(default_factory=dict)  # PERF_KEYS, their newest values


# ---------------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class LinkChanged:
    host: str
    link: Link
    reason: str | None = None
    retry_in_s: float | None = None


@dataclass(frozen=True)
class GpuSampled:
    host: str
    gpus: tuple[Gpu, ...]  # () when the host has no GPU
    time: float | None = None  # the sample's timestamp on the host (unix s), when nvidia-smi gave one
    note: str | None = None


@dataclass(frozen=True)
class RunsListed:
    host: str
    runs: tuple[RunRow, ...]


@dataclass(frozen=True)
class RunUpdated:
    detail: RunDetail


@dataclass(frozen=True)
class DoctorRead:
    """The host's last doctor verdict and when it ran, read from its doctor results (None: it has none)."""

    host: str
    verdict: str | None
    time: float | None = None


@dataclass(frozen=True)
class StopRead:
    """The host's stop command (``stop``, ``stop_when``): its alerts status's ``stop``, read at ``time``."""

    host: str
    stop: dict[str, Any] | None  # when, armed (trigger), in_s (seconds to the command then), last
    time: float  # laptop unix s


HostEvent = LinkChanged | GpuSampled | RunsListed | DoctorRead | StopRead


def ended_runs(before: tuple[RunRow, ...], after: tuple[RunRow, ...]) -> list[RunRow]:
    """Runs that were running or queued in the previous listing and are not any more: what the
    dashboard tells the user about (the first listing of a host tells nothing)."""
    was_active = {r.run_id for r in before if r.state.partition(" ")[0] in ACTIVE}  # "running (attempt 2/4)"
    return [r for r in after if r.run_id in was_active and r.state.partition(" ")[0] not in ACTIVE]


def _push(history: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    if value is None:
        return history
    return (*history, value)[-HISTORY:]


def apply(state: HostState, event: HostEvent) -> HostState:
    """Fold one event into a host's state (pure: the same inputs always draw the same screen)."""
    if isinstance(event, LinkChanged):
        return replace(state, link=event.link, reason=event.reason, retry_in_s=event.retry_in_s)
    if isinstance(event, DoctorRead):
        return replace(state, doctor=event.verdict, doctor_time=event.time)
    if isinstance(event, StopRead):
        return replace(state, stop=event.stop, stop_read=event.time)
    if isinstance(event, GpuSampled):
        old = {g.reading.index: g for g in state.gpus or ()}
        gpus = []
        for r in event.gpus:
            prev = old.get(r.index, GpuState(r))
            gpus.append(GpuState(r, _push(prev.util_history, r.util_pct), _push(prev.mem_history, r.mem_pct)))
        return replace(
            state,
            link="up",
            reason=None,
            retry_in_s=None,
            gpus=tuple(gpus),
            gpu_note=event.note,
            sample_time=event.time,
        )
    return replace(state, runs=event.runs)


# ---------------------------------------------------------------------------------------- metrics file
class MetricsParser(MetricsReader):
    """Accumulates metrics.jsonl as it is followed, chunk by chunk (pippa_contract.metrics: a partial
    line waits for its newline; the first header starts the curves afresh, so reading a replaced file
    from byte 0 again rebuilds them; a resumed header drops points past its step)."""

    def __init__(self) -> None:
        super().__init__()
        self._reset()

    def _reset(self) -> None:
        self.series: dict[str, list[tuple[int, float]]] = {k: [] for k in PLOTTED}
        self.evals: dict[str, list[tuple[int, float]]] = {}
        self.perf: dict[str, float] = {}
        self.wandb_url: str | None = None
        self.end_status: str | None = None
        self.last_step: int | None = None
        self.seen_any = False

    def record(self, rec: dict[str, Any]) -> None:
        super().record(rec)
        self.seen_any = True  # any record, even a foreign one: the run has a metrics file

    def on_header(self, rec: dict[str, Any], keep: int) -> None:
        if keep >= 0:
            self._rewind(keep)
        else:
            self._reset()
        wandb = rec.get("wandb")
        if isinstance(wandb, dict) and isinstance(wandb.get("url"), str):
            self.wandb_url = wandb["url"]

    def on_step(self, step: int, rec: dict[str, Any]) -> None:
        self.last_step = step
        for key in _STEP_KEYS:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.series.setdefault(key, []).append((step, float(v)))
        for key in PERF_KEYS:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.perf[key] = float(v)

    def on_eval(self, step: int, rec: dict[str, Any]) -> None:
        for key in EVAL_PLOTTED:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.evals.setdefault(key, []).append((step, float(v)))

    def on_end(self, rec: dict[str, Any]) -> None:
        self.end_status = str(rec.get("status"))

    def _rewind(self, step: int) -> None:
        """Forget what a resume from ``step`` redoes (a reader that saw the killed run's lines)."""
        for points in self.series.values():
            points[:] = [p for p in points if p[0] <= step]
        kept = {k: [p for p in v if p[0] <= step] for k, v in self.evals.items()}
        self.evals = {k: v for k, v in kept.items() if v}
        self.end_status = None
        if self.last_step is not None:
            self.last_step = min(self.last_step, step)

    def last(self, key: str) -> float | None:
        points = self.series.get(key)
        return points[-1][1] if points else None

    def detail(self, host: str, run_id: str, log_tail: tuple[str, ...]) -> RunDetail:
        return RunDetail(
            host=host,
            run_id=run_id,
            series={k: tuple(v) for k, v in self.series.items()},
            evals={k: tuple(v) for k, v in self.evals.items()},
            wandb_url=self.wandb_url,
            end_status=self.end_status,
            has_metrics=self.seen_any,
            log_tail=log_tail,
            perf=dict(self.perf),
        )


class LogTail:
    """The last ``LOG_TAIL`` lines of a followed log (bytes in, text lines out)."""

    def __init__(self, keep: int = LOG_TAIL) -> None:
        self._keep = keep
        self._buf = b""
        self.lines: list[str] = []

    def feed(self, chunk: bytes) -> None:
        data = self._buf + chunk
        *done, self._buf = data.split(b"\n")
        for raw in done:
            # A progress bar redraws with \r: only the last state of the line is worth showing; the
            # host's escape sequences never reach the terminal.
            self.lines.append(screen_line(raw))
        del self.lines[: -self._keep]

    def tail(self) -> tuple[str, ...]:
        partial = screen_line(self._buf)
        return (*self.lines, partial) if partial else tuple(self.lines)
