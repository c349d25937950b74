"""The life of one run, the same for every method (grpo, sft, dpo, selfplay): ``RunLifecycle``.

A run writes ``<run-dir>/metrics.jsonl`` (header, steps, evals, end) and
``<run-dir>/checkpoints/checkpoint-<step>`` (docs/CONTRACTS.md). Every way out writes an end line:
completed, interrupted (SIGINT / SIGTERM, exit 130; with checkpointing on, after saving the current
step's checkpoint; SIGUSR1 / SIGUSR2 the same with exit ``timelimit`` / ``preempted``,
pippa_contract.exitcodes), diverged, or failed (exception, exit 1). Only SIGKILL leaves no end line. A failure
before the first step (model or data that does not load) still writes a header and a ``failed`` end line,
then raises: a TrainingError as itself, anything else as StartFailed, which the entry point prints as one
line. ``--resume`` continues from the newest checkpoint into the same metrics file, after moving the
lines it will redo to ``metrics.superseded.jsonl``.

A method's ``run`` reads::

    with RunLifecycle(res, run_dir, resume) as life:   # checkpoint, supersede, seed, settled config
        ...load the model (life.res), data...
        life.open_record()                             # W&B, the metrics header (rank 0)
        ...build the trainer...
        life.training(banner, step=lambda: ...)        # signal handlers; setup is over
        ...train...
    return life.code
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pippa_contract import exitcodes
from training_core.config import Resolved
from training_core.errors import StartFailed, TrainingError
from training_core.run import layout as run_layout
from training_core.run.divergence import Diverged


class StopOnSignal:
    """SIGINT / SIGTERM handler. With checkpointing on, the first signal asks the trainer to finish the
    current step, save ``checkpoint-<step>`` and stop, so ``--resume`` continues from the exact step; a
    second signal, or any signal with checkpointing off, stops at once."""

    def __init__(self, save: bool) -> None:
        self.save = save
        self.requested: int | None = None
        self.received: int | None = None  # the first signal (its class sets the exit status)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self.save and self.requested is None:
            self.requested = signum
            print(
                f"signal {signum}: saving a checkpoint after this step, then stopping "
                "(signal again to stop now)",
                file=sys.stderr,
                flush=True,
            )
            return
        raise KeyboardInterrupt(f"signal {signum}")


def first_line(e: BaseException) -> str:
    """``Type: first line of the message``: HF errors span paragraphs, a run's end line wants one."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def disk_full_line(e: BaseException, run_dir: Path) -> str | None:
    """``disk full: writing <path>: No space left on device (0 B free on /data)`` when ``e`` (or what
    caused it) is a full disk or quota: an OSError's errno, or the text torch's and safetensors' writers
    wrap it in (``file write failed``, ``StorageFull``) with the run's file system out of space."""
    from pippa_contract import diskspace

    seen: BaseException | None = e
    while seen is not None:
        if diskspace.is_full(seen):
            name = getattr(seen, "filename", None)
            return diskspace.line(str(name) if name else str(run_dir), seen)
        seen = seen.__cause__ or seen.__context__
    free = diskspace.free_bytes(str(run_dir))
    text = str(e)
    if (
        "No space left" in text
        or "StorageFull" in text
        or "Disk quota" in text
        or ("write failed" in text and free is not None and free < diskspace.FULL_BELOW)
    ):
        return diskspace.line(str(run_layout.checkpoints_dir(run_dir)), None)
    return None


class RunLifecycle:
    """Owns what every run opens and must close: the newest checkpoint and the superseded lines on
    ``--resume``, the seed, the settled config (``training_core.models.settle``), W&B, the metrics
    header and end line, the SIGINT / SIGTERM handlers, the failed-start record and the final line."""

    def __init__(self, res: Resolved, run_dir: Path, resume: bool) -> None:
        from training_core.run.metrics import NullWriter
        from training_core.run.samples import NullSamples

        self.res = res
        self.run_dir = run_dir
        self.resume = resume
        self.facts: Any = None
        self.resume_from: Path | None = None
        self.resumed_step: int | None = None
        self.main = True  # rank 0: one metrics.jsonl and one W&B run per run
        self.writer: Any = NullWriter()
        self.samples: Any = NullSamples()  # training_core.run.samples: what the model wrote (rank 0)
        self.alarm_watch: Any = None  # training_core.run.alarm_watch (rank 0)
        self.wandb_info: dict[str, Any] | None = None
        self.stop = StopOnSignal(save=res.config.checkpoint.every > 0)
        self.code = 1
        self._recording = False  # the header is written
        self._step: Callable[[], int] | None = None  # set once training starts
        self._old_handlers: dict[int, Any] = {}

    # setup ---------------------------------------------------------------------------------------

    def __enter__(self) -> RunLifecycle:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._begin()
        except BaseException as e:
            self._fail_start(e)
        return self

    def _begin(self) -> None:
        from training_core import models
        from training_core.hardware.platform import apply_offline_env, detect
        from training_core.run import metrics
        from training_core.run.layout import checkpoints_dir, resume_checkpoint

        cfg = self.res.config
        self.facts = detect(offline_probe=cfg.model.name != "tiny")
        apply_offline_env(self.facts)
        if metrics.process_rank() == 0:  # what `pippa run` shows while it waits for the first line
            print("starting: importing torch and transformers", flush=True)
        # HF libraries read the offline switches at import time: set them before importing them.
        from transformers import set_seed
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" / "Writing model shards" bars clutter the log
        ckpt_dir = checkpoints_dir(self.run_dir)
        self.resume_from = resume_checkpoint(ckpt_dir, metrics.process_rank() == 0) if self.resume else None
        if self.resume and self.resume_from is None:
            print(f"resume: no checkpoint in {ckpt_dir}; starting from step 0", flush=True)
        self.resumed_step = int(self.resume_from.name.split("-")[1]) if self.resume_from else None
        self.main = metrics.process_rank() == 0
        if self.resume and self.main:
            # The lines the resumed run redoes go to metrics.superseded.jsonl: one row per step for readers.
            step = -1 if self.resumed_step is None else self.resumed_step
            moved = metrics.supersede(self.metrics_path, step)
            if moved:
                print(f"resume: moved {moved} redone lines to metrics.superseded.jsonl", flush=True)
            from training_core.run.samples import supersede

            moved = supersede(self.run_dir, step)
            if moved:
                print(f"resume: moved {moved} redone samples to samples.superseded.jsonl", flush=True)
        set_seed(cfg.seed)  # python, numpy and torch (CUDA too)
        self.res = models.settle(self.res, self.facts, self.run_dir.parent)
        import torch

        from training_core.run import step_plan

        name = self.res.config.model.name  # an `auto` step sized for this GPU (none: the CPU path)
        gpu_gb = self.facts.gpu_memory_gb if torch.cuda.is_available() else 0.0
        self.res = step_plan.settle(self.res, gpu_gb, lambda: step_plan.model_config(name))

    @property
    def metrics_path(self) -> Path:
        return run_layout.metrics_path(self.run_dir)

    def open_record(self) -> None:
        """Start W&B and write the metrics header (rank 0; the other ranks keep a NullWriter)."""
        from training_core.run import metrics

        if not self.main:
            return
        resume_id = metrics.previous_wandb_id(self.metrics_path) if self.resume else None
        from training_core.run.wandb_start import UnlessMoved, start_wandb

        self.wandb_info = start_wandb(self.res, self.run_dir, resume_id)
        # TRL's own W&B callback stays off (report_to none): it would log TRL's key names ("train/reward");
        # the writer mirrors every step and eval record under the metrics.jsonl names instead, never once
        # the run dir is marked moved_to (a stale copy: the W&B run goes on from the new host only).
        mirror = UnlessMoved(self.run_dir, metrics.wandb_mirror) if self.wandb_info else None
        self.writer = metrics.MetricsWriter(self.metrics_path, mirror=mirror)
        self.writer.header(
            self.run_dir.name, self.res.recipe, self.res.as_dict(), self.wandb_info, self.resumed_step
        )
        self._recording = True
        self._open_samples()

    def _open_samples(self) -> None:
        """samples.jsonl (created at the first row: only methods that sample write one) and the alarm
        watch on the metrics."""
        from training_core.run.alarm_watch import AlarmWatch
        from training_core.run.samples import SamplesWriter, interval, sampled_step

        cfg = self.res.config
        every = interval(cfg)
        if every > 0:
            self.samples = SamplesWriter(self.run_dir, cfg)

        def sampled(step: int, now: int) -> int | None:
            return sampled_step(step, now, every) if self.samples.active else None

        self.alarm_watch = AlarmWatch(self.run_dir, cfg, sampled, self.metrics_path if self.resume else None)
        self.writer.observers.append(self.alarm_watch)

    def training(self, banner: str, step: Callable[[], int]) -> None:
        """Setup is over: print the run's first line (rank 0) and route SIGINT / SIGTERM to ``stop``.
        ``step()`` is the last completed step, for the end line."""
        if self.main:
            print(banner, flush=True)
        self._step = step
        # SIGUSR1 / SIGUSR2: an outside engine's time limit or preemption (pippa_contract.exitcodes)
        stops = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
        self._old_handlers = {s: signal.signal(s, self.stop) for s in stops}

    # the end ---------------------------------------------------------------------------------------

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._step is None:
            if e is not None:
                self._fail_start(e)
            return False
        status, error, code, handled = "failed", None, 1, True
        if e is None:
            status, code = "completed", 0
        elif isinstance(e, KeyboardInterrupt):
            status, error, code = "interrupted", str(e) or "interrupted", 130
            asked = exitcodes.signal_class(self.stop.received)
            if asked is not None:  # saved for the engine that sent it, which restarts the run
                code = exitcodes.INFRA_EXIT[asked]
                print(f"{asked}: stopped after saving, exit {code}", file=sys.stderr, flush=True)
            print(f"interrupted at step {self._step()}", file=sys.stderr, flush=True)
        elif isinstance(e, Diverged):  # no checkpoint: it would hold the broken weights
            status, error, code = "diverged", str(e), e.exit_code
            print(f"error: {e}", file=sys.stderr, flush=True)
        elif isinstance(e, Exception) and (full := disk_full_line(e, self.run_dir)):
            error = full  # one line, no traceback: the supervisor classes it disk-full
            print(full, file=sys.stderr, flush=True)
        elif isinstance(e, Exception):
            error = f"{type(e).__name__}: {e}"
            traceback.print_exception(e)
        else:
            handled = False  # SystemExit and the like: recorded as failed, then on their way
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
        try:  # on a full disk these writes fail too: the run's end is still told (output.log, exit code)
            if self.alarm_watch is not None:
                self.alarm_watch.check()  # a long run checks every few records; the end sees them all
            self.samples.close()
            self.writer.end(status, self._step(), error)
        except OSError as failed:
            print(disk_full_line(failed, self.run_dir) or f"could not record the end: {failed}", flush=True)
        self.writer.close()
        self._finish_wandb(code)
        self.code = code
        if self.main:
            print(f"run {self.run_dir.name} {status} at step {self._step()}", flush=True)
        return handled

    def _fail_start(self, e: BaseException) -> None:
        """A failure before the first step: header (if none yet) and a failed or interrupted end line."""
        interrupted = isinstance(e, KeyboardInterrupt)
        error = str(e) if isinstance(e, TrainingError) else first_line(e)
        from training_core.run import metrics

        if metrics.process_rank() == 0:  # rank 0 records the run (setup may fail before self.main is set)
            end = metrics.end_record(
                "interrupted" if interrupted else "failed",
                self.resumed_step or 0,
                None if interrupted else error,
            )
            end["at_start"] = True  # before its first step: a resume meets the same cause (contract.advice)
            if self._recording:
                self.writer.write(end)
                self.writer.close()
            else:  # header and end line in one write: `pippa run` never sees the header alone
                writer = metrics.MetricsWriter(self.metrics_path)
                writer.header(
                    self.run_dir.name,
                    self.res.recipe,
                    self.res.as_dict(),
                    self.wandb_info,
                    self.resumed_step,
                    end=end,
                )
                writer.close()
            self._finish_wandb(130 if interrupted else 1)
        if isinstance(e, (TrainingError, KeyboardInterrupt)):
            raise e
        raise StartFailed(f"run {self.run_dir.name} failed before its first step: {error}") from e

    def _finish_wandb(self, code: int) -> None:
        if self.wandb_info:
            import wandb

            wandb.finish(exit_code=code)
