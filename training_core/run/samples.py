"""samples.jsonl, the writer's side (format and reading: pippa_contract.samples; docs/samples.md).

``SamplesWriter`` appends rows line by line (flushed, like metrics.jsonl), decides which steps are
sampled (``due``) and keeps the run's samples under ``samples.cap_mb``: over the cap it drops the
superseded rows, then thins the oldest steps (tmp + fsync + rename, so a reader sees the old file or
the new one). ``supersede`` is the resume rule. The writer of ranks other than 0 is ``NullSamples``.
Torch-free: the TRL and self-play adapters hand it plain rows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from pippa_contract import samples as contract
from pippa_contract.secretprints import JOB_SECRET_ENV, Prints, Redactor
from pippa_contract.secretprints import load as load_prints
from pippa_contract.secrets import read_secret_values
from training_core.config import RunConfig
from training_core.run.metrics import move_redone


def interval(cfg: RunConfig) -> int:
    """Steps between sampled batches: ``samples.every``, or a tenth of ``train.max_steps`` (0), or
    never (-1 -> 0)."""
    every = cfg.samples.every
    if every < 0:
        return 0
    if every == 0:
        return max(1, cfg.train.max_steps // 10) if cfg.train.max_steps > 0 else 10
    return every


def sampled_step(since: int, now: int, every: int) -> int:
    """The sampled step an alarm that began at ``since`` points to, when the run is at step ``now``: the
    first sampled step at or after ``since`` if the run has reached it, else the last one before it
    (a hint never names a step with no samples: tiny's alarm at 296 named 300, past the run's end)."""
    if since <= 1 or every <= 0:
        return 1
    first = -(-since // every) * every
    return first if first <= now else max(1, (since // every) * every)


class SamplesWriter:
    active = True

    def __init__(self, run_dir: Path, cfg: RunConfig, secrets: dict[str, str] | None = None) -> None:
        self.path = run_dir / contract.SAMPLES
        self.old = run_dir / contract.SAMPLES_SUPERSEDED
        self.every = interval(cfg)
        self.per_step = max(1, cfg.samples.per_step)
        self.cap = int(cfg.samples.cap_mb * 1_000_000)
        self.secrets = read_secret_values(env_keys=JOB_SECRET_ENV) if secrets is None else secrets
        # and the prints of every secret pushed to this host before (pippa_contract.secretprints)
        self._redactor = Redactor(self.secrets, load_prints() if secrets is None else Prints("", set()))
        self._f: IO[bytes] | None = None  # opened at the first row: SFT and DPO runs write no file
        self._size = self._on_disk()

    def due(self, step: int) -> bool:
        """Whether training step ``step`` is sampled: the first step and every ``every``-th."""
        return self.every > 0 and (step == 1 or step % self.every == 0)

    def row(self, step: int, kind: str, prompt: str, completion: str, **fields: Any) -> dict[str, Any]:
        """A contract row with this run's secrets redacted."""
        return contract.sample_row(step, kind, prompt, completion, redact=self.redact, **fields)

    def redact(self, text: str) -> str:
        return self._redactor.line(text)

    def write(self, rows: list[dict[str, Any]]) -> None:
        data = b"".join(contract.encode(r) for r in rows)
        if not data:
            return
        if self._f is None:
            self._f = self.path.open("ab")
        self._f.write(data)
        self._f.flush()
        self._size += len(data)
        if self._size > self.cap:
            self._trim()

    def _on_disk(self) -> int:
        return sum(p.stat().st_size for p in (self.path, self.old) if p.exists())

    def _trim(self) -> None:
        """Under the cap again: the superseded rows go first, then every other old step (never the
        newest), down to ``THIN_TO`` of the cap."""
        if self.old.exists():
            self.old.unlink()
            self._size = self._on_disk()
            if self._size <= self.cap:
                return
        budget = int(self.cap * contract.THIN_TO)
        drop = contract.thin_plan(contract.steps_of(str(self.path)), budget)
        if not drop:
            return
        if self._f is not None:
            self._f.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with self.path.open("rb") as src, tmp.open("wb") as dst:
            for raw in src:
                row = contract.parse(raw) if raw.endswith(b"\n") else None
                if row is not None and row["step"] not in drop:
                    dst.write(raw)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, self.path)
        self._f = self.path.open("ab")
        self._size = self._on_disk()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class NullSamples(SamplesWriter):
    """Ranks other than 0, and runs with sampling off: nothing is sampled or written."""

    active = False

    def __init__(self) -> None:
        self.every = 0
        self.per_step = 0
        self.secrets = {}
        self._redactor = Redactor({}, Prints("", set()))

    def due(self, step: int) -> bool:
        return False

    def write(self, rows: list[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        pass


def supersede(run_dir: Path, resumed_from_step: int) -> int:
    """Before a resumed run samples again: the rows of the steps it redoes (and a torn last line) move
    from samples.jsonl to samples.superseded.jsonl, as metrics.jsonl's do (``metrics.move_redone``);
    one row per (step, kind, index) afterwards. Returns how many lines moved; with none the file is
    untouched. -1 supersedes every row."""
    return move_redone(
        run_dir / contract.SAMPLES,
        run_dir / contract.SAMPLES_SUPERSEDED,
        lambda line: contract.redone(line, resumed_from_step),
    )


def prompt_text(prompt: Any) -> str:
    """A dataset prompt as text: plain text as is, chat messages as ``role: content`` lines."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(
            f"{m.get('role', '?')}: {m.get('content', '')}" if isinstance(m, dict) else str(m) for m in prompt
        )
    return str(prompt)
