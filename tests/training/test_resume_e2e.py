"""Stop and resume on the tiny recipe through the real CLI: a stop signal saves the exact step, and a
resumed run leaves one row per step in metrics.jsonl (the redone lines go to metrics.superseded.jsonl)
and logs the same keys to W&B (offline) as to metrics.jsonl."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _start(run_dir: Path, *sets: str, resume: bool = False, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:  # fmt: skip
    argv = [sys.executable, "-m", "training_core.train", "tiny", "--run-dir", str(run_dir)]
    for s in sets:
        argv += ["--set", s]
    if resume:
        argv.append("--resume")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    full_env.update(env or {})
    return subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for_step(proc: subprocess.Popen[str], path: Path, step: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and any(
            r["type"] == "step" and r["step"] >= step for r in _records(path) if path.stat().st_size
        ):
            return
        assert proc.poll() is None, f"run ended early: {proc.stdout.read() if proc.stdout else ''}"
        time.sleep(0.1)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def _one_row_per_step(recs: list[dict[str, Any]], last: int) -> None:
    steps = [r["step"] for r in recs if r["type"] == "step"]
    assert steps == list(range(1, last + 1))
    evals = [r["step"] for r in recs if r["type"] == "eval"]
    assert len(evals) == len(set(evals))
    assert [r["type"] for r in recs].count("end") == 1 and recs[-1]["type"] == "end"


def _wandb_records(path: Path) -> Iterator[Any]:
    """Records of an offline run's ``.wandb`` file. wandb 0.31 has no public reader for it (its datastore
    moved into the Go core, and offline runs write no wandb-summary.json): the file is a LevelDB log
    (7-byte file header; 32 KiB blocks of chunks: crc32, length, type FULL/FIRST/MIDDLE/LAST) of
    protobuf ``Record`` messages (wandb.proto, public). Kept to this one function; wandb is pinned <0.32."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, block = path.read_bytes(), 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def _wandb_keys_by_step(wandb_dir: Path, run_id: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for f in sorted(wandb_dir.rglob(f"offline-run-*-{run_id}/*.wandb")):
        for rec in _wandb_records(f):
            if rec.WhichOneof("record_type") == "history":
                keys = {i.key or "/".join(i.nested_key) for i in rec.history.item}
                out.setdefault(rec.history.step.num, set()).update(k for k in keys if not k.startswith("_"))
    return out


def test_sigterm_saves_the_current_step_and_resume_continues_there_with_wandb_keys_as_in_metrics(
    tmp_path: Path,
) -> None:
    run_dir, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    wandb_dir.mkdir()
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"}
    sets = ("train.max_steps=16", "eval.interval=8", "eval.n=8", "checkpoint.every=100")
    metrics = run_dir / "metrics.jsonl"
    proc = _start(run_dir, *sets, env=env)
    _wait_for_step(proc, metrics, 4)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    end = _records(metrics)[-1]
    assert end["type"] == "end" and end["status"] == "interrupted"
    stopped = end["step"]
    # checkpoint.every=100 never fires in 16 steps: this checkpoint is the stop signal's.
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*")) == [f"checkpoint-{stopped}"]

    proc = _start(run_dir, *sets, resume=True, env=env)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert f"resuming from step {stopped}" in out
    recs = _records(metrics)
    _one_row_per_step(recs, 16)
    headers = [r for r in recs if r["type"] == "header"]
    assert [h["resumed_from_step"] for h in headers] == [None, stopped]
    assert headers[0]["wandb"]["id"] == headers[1]["wandb"]["id"]
    assert _records(run_dir / "metrics.superseded.jsonl") == [end]

    # W&B got every step and eval record under the metrics.jsonl names, at step = global step.
    want: dict[int, set[str]] = {}
    for r in recs:
        if r["type"] in ("step", "eval"):
            want.setdefault(r["step"], set()).update(k for k in r if k not in ("type", "step", "time"))
    got = _wandb_keys_by_step(wandb_dir, headers[0]["wandb"]["id"])
    assert got == want
    assert "reward/mean" in got[1] and "train/reward" not in got[1]


def test_killed_run_resume_moves_redone_lines_out_of_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    sets = ("train.max_steps=12", "eval.task=none", "checkpoint.every=5")
    proc = _start(run_dir, *sets)
    _wait_for_step(proc, metrics, 7)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(r["step"] for r in _records(metrics) if r["type"] == "step")
    newest = max(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert newest < killed_at  # the steps after the checkpoint are redone

    proc = _start(run_dir, *sets, resume=True)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    _one_row_per_step(_records(metrics), 12)
    moved = _records(run_dir / "metrics.superseded.jsonl")
    assert [r["step"] for r in moved if r["type"] == "step"] == list(range(newest + 1, killed_at + 1))
