"""What a checkpoint's manifest (pippa_contract.checkpoint_check: each file's size and sha256, written
last) costs a checkpoint save of the tiny recipe: goal <= 2% (issue 44).

The real thing, in one process: ``python -m training_core.train tiny`` with a checkpoint every step.
A save is transformers' ``Trainer._save_checkpoint`` (model, optimizer, scheduler, RNG, trainer state:
TRL's own save path) plus pippa's ``publish`` (the rename into ``checkpoints/``, the rotation to
``keep``) and the hand-over of the checkpoint to the manifest thread (``Manifests.submit``), timed
from the first to the last. The saves alternate between the two arms, with the manifest and with
``submit`` switched off (ABBA by pairs, so drift in the shared machine's load falls on both). It
prints each arm's median, the ratio, and the manifest's own time in its thread.

    .venv/bin/python bench/bench_manifest.py [--saves 60]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import Trainer

from training_core import train
from training_core.methods import trainer as pippa_trainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=60, help="saves in all (the first 2 warm up)")
    args = parser.parse_args()
    real_manifest, real_save, real_submit = (
        pippa_trainer.write_manifest,
        Trainer._save_checkpoint,
        pippa_trainer.Manifests.submit,
    )
    times: dict[str, list[float]] = {"manifest": [], "none": []}
    own: list[float] = []  # the manifest's own time, in its thread
    state = {"n": 0, "t": 0.0}

    def arm() -> str:
        n = state["n"]
        return "manifest" if (n // 2 + n) % 2 == 0 else "none"  # A B B A A B B A ...

    def manifest(ckpt: str, inode: int | None = None) -> None:
        t = time.perf_counter()
        real_manifest(ckpt, inode)
        own.append(time.perf_counter() - t)

    def save(self: Any, *a: Any, **kw: Any) -> Any:
        state["t"] = time.perf_counter()
        return real_save(self, *a, **kw)

    def submit(self: Any, ckpt: Path) -> None:  # right after publish: the save's end
        if arm() == "manifest":
            real_submit(self, ckpt)
        if state["n"] >= 2:
            times[arm()].append(time.perf_counter() - state["t"])
        state["n"] += 1

    pippa_trainer.write_manifest = manifest
    Trainer._save_checkpoint = save  # type: ignore[method-assign]
    pippa_trainer.Manifests.submit = submit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        sets = [f"train.max_steps={args.saves}", "checkpoint.every=1", "eval.interval=100000"]
        argv = ["tiny", "--run-dir", str(Path(tmp) / "run"), *[a for s in sets for a in ("--set", s)]]
        code = train.main(argv)
        size = sum(p.stat().st_size for p in (Path(tmp) / "run" / "checkpoints").rglob("*") if p.is_file())
    assert code == 0, f"the tiny run ended {code}"
    with_m, without = statistics.median(times["manifest"]), statistics.median(times["none"])
    print(
        f"tiny recipe, {len(times['manifest'])} + {len(times['none'])} saves alternated, checkpoints kept: "
        f"{size / 1e6:.2f} MB"
    )
    print(f"save with manifest: median {with_m * 1e3:.1f} ms; without: {without * 1e3:.1f} ms")
    print(f"ratio with/without: {with_m / without:.3f}x (goal <= 1.02x)")
    print(
        f"the manifest's own time, in its thread while training goes on: median "
        f"{statistics.median(own) * 1e3:.2f} ms per checkpoint ({len(own)} manifests)"
    )


if __name__ == "__main__":
    main()
