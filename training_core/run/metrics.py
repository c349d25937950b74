"""metrics.jsonl (docs/CONTRACTS.md) and the stdout progress line: the run's live record.

``MetricsWriter`` appends one JSON object per line and flushes it, so ``pippa logs``/``dash`` can stream
the file while the run writes it. ``namespaced`` maps TRL's logged keys to the contract's namespaced
keys (``reward/mean``, ``loss/total``, ``perf/...``); keys TRL already namespaces pass through, others
get ``trl/``. ``MetricsCallback`` is the trainer-side adapter: one step line plus one progress line per
logged step, with throughput computed from TRL's token counter.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pippa_contract.metrics import redone
from training_core.run.flops import Setup, Shape, StepCounts, figures
from training_core.run.layout import SUPERSEDED
from training_core.run.testhooks import SLOW_RECORD_ENV

RENAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "reward/frac_zero_std",
    "loss": "loss/total",
    "kl": "loss/kl",
    "policy_loss": "loss/policy",
    "grad_norm": "grad/norm",
    "learning_rate": "optim/lr",
    "entropy": "policy/entropy",
    "mean_token_accuracy": "policy/token_accuracy",  # SFT / DPO: greedy next-token hits on the response
    "step_time": "perf/step_time_s",
    "num_tokens": "perf/num_tokens",
    "epoch": "train/epoch",
}
# Peak dense bf16/fp16 tensor FLOP/s of the cards we rent, for the MFU estimate.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "V100": 125e12, "L4": 121e12}
_SKIP = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos"}


def namespaced(logs: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in logs.items():
        if key in _SKIP or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key.startswith("rewards/") and key.endswith("/mean"):
            name = f"reward/{key[len('rewards/') : -len('/mean')]}"
        elif key.startswith("rewards/") and key.count("/") > 1:
            continue  # per-function std: reward/std covers the total (DPO's rewards/margins pass through)
        else:
            name = RENAMES.get(key, key if "/" in key else f"trl/{key}")
        out[name] = float(value) if math.isfinite(value) else float("nan")
    return out


Mirror = Callable[[int, dict[str, Any]], None]


class MetricsWriter:
    """Appends the run's lines; ``mirror(step, metrics)`` gets every step and eval record too, with the
    same keys (the runner sets it to ``wandb_mirror`` when a W&B run is active, so W&B and
    metrics.jsonl never disagree on names)."""

    active = True  # False for NullWriter: callbacks print their lines only where the run is recorded

    def __init__(self, path: Path, mirror: Mirror | None = None) -> None:
        self.path = path
        self.mirror = mirror
        # Called with every step and eval record once written (training_core.run.alarm_watch).
        self.observers: list[Callable[[dict[str, Any]], None]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pause_s = float(os.environ.get(SLOW_RECORD_ENV) or 0)  # training_core.run.testhooks

    def write(self, *records: dict[str, Any]) -> None:
        """Append ``records`` in ONE write(2): a reader sees all of them or none (a failed start's header
        and end line arrive together, so ``pippa run`` never takes the header alone for a start). Whole
        lines or none: a write the disk cuts short (ENOSPC, EDQUOT) is truncated away before the error
        goes on, so a resume never appends to half a line."""
        data = "".join(json.dumps(_finite(r), default=str) + "\n" for r in records).encode()
        at = os.fstat(self._fd).st_size
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError:
            os.ftruncate(self._fd, at)  # frees space, never needs any
            raise
        if self._pause_s:
            time.sleep(self._pause_s)

    def header(
        self,
        run_id: str,
        recipe: str,
        config: dict[str, Any],
        wandb: dict[str, Any] | None,
        resumed_from_step: int | None,
        *,
        end: dict[str, Any] | None = None,
    ) -> None:
        """The header line; with ``end`` (``end_record``), that end line in the same write."""
        header = {
            "type": "header",
            "run_id": run_id,
            "recipe": recipe,
            "config": config,
            "wandb": wandb,
            "time": time.time(),
            "resumed_from_step": resumed_from_step,
        }
        self.write(header, *([end] if end is not None else []))

    def step(self, step: int, metrics: dict[str, float]) -> None:
        self._record({"type": "step", "step": step, "time": time.time(), **metrics})
        if self.mirror is not None:
            self.mirror(step, metrics)

    def eval(self, step: int, metrics: dict[str, Any]) -> None:
        self._record({"type": "eval", "step": step, "time": time.time(), **metrics})
        if self.mirror is not None:
            self.mirror(step, metrics)

    def _record(self, record: dict[str, Any]) -> None:
        self.write(record)
        for observe in self.observers:
            observe(record)

    def end(self, status: str, step: int, error: str | None) -> None:
        self.write(end_record(status, step, error))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def end_record(status: str, step: int, error: str | None) -> dict[str, Any]:
    """The end line; its error is recorded without a secret it may quote (pippa_contract.secretprints)."""
    if error:
        from pippa_contract.secretprints import JOB_SECRET_ENV, host_redactor

        error = host_redactor(JOB_SECRET_ENV).line(error)
    return {"type": "end", "status": status, "step": step, "time": time.time(), "error": error}


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


class NullWriter(MetricsWriter):
    """The writer of ranks other than 0: a run has one metrics.jsonl and one W&B run, written by rank 0;
    the other ranks run the same callbacks (an eval under ZeRO-3 needs every rank) and record nothing."""

    active = False

    def __init__(self) -> None:
        self.mirror = None
        self.observers = []

    def write(self, *records: dict[str, Any]) -> None:
        pass

    def step(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def eval(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def process_rank() -> int:
    """This process's global rank: torchrun (accelerate launch, srun) sets RANK; 0 when it runs alone."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def supersede(path: Path, resumed_from_step: int) -> int:
    """Before a resumed run appends its header: move the killed run's lines that the resume redoes
    (step and eval lines past ``resumed_from_step``, end lines, a torn last line) out of ``path`` into
    ``metrics.superseded.jsonl`` beside it, so readers see one row per step (docs/CONTRACTS.md).
    Returns how many lines moved (``move_redone``). ``resumed_from_step`` -1 supersedes every step
    (no checkpoint)."""
    return move_redone(path, path.with_name(SUPERSEDED), lambda line: redone(line, resumed_from_step))


def move_redone(path: Path, superseded: Path, is_redone: Callable[[bytes], bool]) -> int:
    """Move the lines of ``path`` that ``is_redone`` picks, and a torn last line, to ``superseded``.

    The moved lines are appended to ``superseded`` and fsynced first, then ``path`` is rewritten
    through a temp file in the same directory and ``os.replace`` (a reader sees the old or the new
    file, never a mix; a follower notices the new inode). Returns how many lines moved; with none to
    move (or no file) ``path`` is left untouched. metrics.jsonl and samples.jsonl both use it."""
    if not path.is_file():
        return 0
    keep: list[bytes] = []
    moved: list[bytes] = []
    lines = path.read_bytes().split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline, else a line cut by the kill
    for line in lines:
        (moved if is_redone(line) else keep).append(line + b"\n")
    if torn:
        moved.append(torn + b"\n")
    if not moved:
        return 0
    with superseded.open("ab") as f:
        f.writelines(moved)
        f.flush()
        os.fsync(f.fileno())
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        f.writelines(keep)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return len(moved)


def wandb_mirror(step: int, metrics: dict[str, Any]) -> None:
    """Log a record to the active W&B run under the metrics.jsonl keys, at ``step`` = the trainer's
    global step. W&B ignores a step lower than one it already has (a resumed run redoing steps of the
    killed one keeps the killed run's values there)."""
    import wandb

    if wandb.run is not None:
        wandb.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)


def previous_wandb_id(path: Path) -> str | None:
    """The W&B run id of the last header in an existing metrics file (a resumed run continues it)."""
    if not path.is_file():
        return None
    found = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("type") == "header" and rec.get("wandb"):
            found = rec["wandb"].get("id")
    return found


def progress_line(step: int, max_steps: int, m: dict[str, float]) -> str:
    def f(key: str, fmt: str) -> str:
        v = m.get(key)
        return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else "-"

    if "rewards/margins" in m:  # DPO: how far the policy prefers chosen over rejected
        return (
            f"step {step}/{max_steps}  loss {f('loss/total', '.4f')}  margin {f('rewards/margins', '.3f')}  "
            f"pref acc {f('rewards/accuracies', '.3f')}  {f('perf/tokens_per_s', '.0f')} tok/s"
        )
    if "reward/mean" not in m and "policy/token_accuracy" in m:  # SFT: nothing sampled
        return (
            f"step {step}/{max_steps}  loss {f('loss/total', '.4f')}  "
            f"token acc {f('policy/token_accuracy', '.3f')}  {f('perf/tokens_per_s', '.0f')} tok/s"
        )
    return (
        f"step {step}/{max_steps}  reward {f('reward/mean', '.3f')}  loss {f('loss/total', '.4f')}  "
        f"len {f('completions/mean_length', '.1f')}  {f('perf/step_time_s', '.2f')}s/step  "
        f"{f('perf/tokens_per_s', '.0f')} tok/s"
    )


def interval_figures(
    m: dict[str, float], seconds: float, tokens: float, setup: Setup, peak: float | None
) -> dict[str, float]:
    """The per-phase figures and MFU/HFU of one logged interval (training_core.run.flops). Generation
    seconds and tokens come from the GRPO trainer (``perf/gen_*``); without them (SFT, DPO) the whole
    interval is the train phase and the LM head runs on every token."""
    counts = StepCounts(
        seconds=seconds,
        gen_seconds=m.get("perf/gen_time_s", 0.0),
        tokens=tokens,
        scored=m.get("perf/gen_tokens", tokens),
        gen_prompt_tokens=m.get("perf/gen_prompt_tokens", 0.0),
        gen_tokens=m.get("perf/gen_tokens", 0.0),
    )
    return figures(counts, setup, peak)


def peak_flops(gpu_name: str) -> float | None:
    for key, flops in PEAK_FLOPS.items():
        if key in gpu_name.upper():
            return flops
    return None


def make_callback(
    writer: MetricsWriter,
    progress: bool,
    n_params: int,
    gpu_name: str = "",
    out: IO[str] | None = None,
    setup: Setup | None = None,
) -> Any:
    """``setup``: the model's FLOP shape (training_core.run.flops); without it every weight counts as body."""
    from transformers import TrainerCallback

    flop_setup = setup or Setup(Shape(body=n_params, head=0))

    class MetricsCallback(TrainerCallback):  # type: ignore[misc]
        """Step lines to metrics.jsonl and progress lines to stdout, one per logged step."""

        def __init__(self) -> None:
            self.last_tokens: float | None = None
            self.last_time = time.time()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.last_time = time.time()
            self.last_tokens = float(state.num_input_tokens_seen or 0)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if not logs or "train_runtime" in logs or any(k.startswith("eval_") for k in logs):
                return
            m = namespaced(logs)
            now, tokens = time.time(), m.get("perf/num_tokens")
            import torch

            cuda = torch.cuda.is_available()
            if tokens is not None and self.last_tokens is not None and now > self.last_time:
                m["perf/tokens_per_s"] = (tokens - self.last_tokens) / (now - self.last_time)
                peak = peak_flops(gpu_name) if cuda else None
                dt, dtok = now - self.last_time, tokens - self.last_tokens
                m.update(interval_figures(m, dt, dtok, flop_setup, peak))
            self.last_time, self.last_tokens = now, tokens
            if cuda:
                m["perf/peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
            writer.step(state.global_step, m)
            if progress:
                print(
                    progress_line(state.global_step, state.max_steps, m), file=out or sys.stdout, flush=True
                )
            from training_core.run.divergence import check

            check(state.global_step, m)  # NaN/inf loss or reward: the run ends "diverged" (runner)

    return MetricsCallback()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
