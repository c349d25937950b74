"""The tiny recipe end to end on CPU through the real CLI: it learns, streams metrics.jsonl while it
runs, survives SIGKILL + --resume, reports SIGTERM as interrupted, and logs to W&B offline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _start(
    run_dir: Path, *sets: str, resume: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
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


class Tail:
    """Reads metrics.jsonl like pippa does: complete lines only, a partial last line waits."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos, self.records = path, 0, []  # type: tuple[Path, int, list[dict[str, Any]]]

    def poll(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.pos)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.pos += len(complete)
        new = [json.loads(line) for line in complete.decode().splitlines()]
        self.records.extend(new)
        return new


def _wait_for_step(proc: subprocess.Popen[str], tail: Tail, step: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        tail.poll()
        if any(r["type"] == "step" and r["step"] >= step for r in tail.records):
            return
        assert proc.poll() is None, f"run ended early: {proc.stdout.read() if proc.stdout else ''}"
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def _steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "step"]


def test_tiny_recipe_learns_and_metrics_stream_while_it_runs(tmp_path: Path) -> None:
    run_dir = tmp_path / "20260101-000000-tiny-abcd"
    proc = _start(run_dir, "checkpoint.every=0")
    tail = Tail(run_dir / "metrics.jsonl")
    seen_while_running = 0
    while proc.poll() is None:
        seen_while_running += len([r for r in tail.poll() if r["type"] == "step"])
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out
    tail.poll()
    recs = tail.records
    assert seen_while_running > 10  # parsed line by line during the run, not only at the end
    header, end = recs[0], recs[-1]
    assert (
        header["type"] == "header"
        and header["run_id"] == run_dir.name
        and header["resumed_from_step"] is None
    )
    assert header["config"]["config"]["train"]["loss_type"] == "dr_grpo" and header["wandb"] is None
    assert end == {**end, "type": "end", "status": "completed", "step": 200, "error": None}
    steps = _steps(recs)
    assert [s["step"] for s in steps] == list(range(1, 201))
    for key in (
        "reward/mean",
        "reward/std",
        "reward/frac_zero_std",
        "reward/baseline_correctness",
        "loss/total",
        "grad/norm",
        "optim/lr",
        "completions/mean_length",
        "policy/entropy",
        "perf/step_time_s",
        "perf/tokens_per_s",
    ):
        assert key in steps[-1], key
    rewards = [s["reward/mean"] for s in steps]
    n = len(rewards) // 5
    first, last = sum(rewards[:n]) / n, sum(rewards[-n:]) / n
    assert last > first + 0.15, (first, last)
    evals = [r for r in recs if r["type"] == "eval"]
    assert [r["step"] for r in evals] == [0, 50, 100, 150, 200]
    assert all(r["eval/n_problems"] == 41 for r in evals)  # every distinct training sum, each once
    # Greedy accuracy against the best constant answer on the same problems: a policy that ignores
    # the prompt scores at most eval/constant_baseline; the trained one must beat it by 0.3.
    assert evals[0]["eval/accuracy"] <= evals[0]["eval/constant_baseline"]
    assert learning_margin(recs) >= 0.3, [(r["eval/accuracy"], r["eval/constant_baseline"]) for r in evals]
    assert "step 200/200  reward" in out and "eval step 0: accuracy" in out


def learning_margin(records: list[dict[str, Any]]) -> float:
    """The last eval's greedy accuracy minus the best constant answer's accuracy on the same problems."""
    last = [r for r in records if r["type"] == "eval"][-1]
    return float(last["eval/accuracy"] - last["eval/constant_baseline"])


@pytest.mark.timeout(1200)
def test_tiny_learning_holds_for_five_seeds(tmp_path: Path) -> None:
    """The README's claim is a distribution, not one lucky run: seeds 0-4 each beat the constant
    baseline by 0.3 (bench/bench_tiny.py also varies thread counts and MKL's kernel paths)."""
    margins: dict[int, float] = {}
    for pair in ((0, 1), (2, 3), (4,)):  # two at a time, one thread each: the 2-core CI machine
        procs = {
            seed: _start(
                tmp_path / f"seed{seed}",
                f"seed={seed}",
                "checkpoint.every=0",
                "eval.interval=0",
                "logging.progress=false",
                env={"OMP_NUM_THREADS": "1"},
            )
            for seed in pair
        }
        for seed, proc in procs.items():
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out
            recs = [json.loads(line) for line in (tmp_path / f"seed{seed}" / "metrics.jsonl").open()]
            margins[seed] = learning_margin(recs)
    assert min(margins.values()) >= 0.3, margins


def test_killed_run_resumes_step_count_and_metrics_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sets = ("train.max_steps=40", "checkpoint.every=10", "eval.task=none")
    proc = _start(run_dir, *sets)
    tail = Tail(run_dir / "metrics.jsonl")
    _wait_for_step(proc, tail, 24)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("checkpoint-"))
    assert ckpts[-1] in ("checkpoint-20", "checkpoint-30")
    assert all((run_dir / "checkpoints" / c / "trainer_state.json").is_file() for c in ckpts)
    newest = int(ckpts[-1].split("-")[1])

    proc = _start(run_dir, *sets, resume=True)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    tail.poll()
    headers = [i for i, r in enumerate(tail.records) if r["type"] == "header"]
    assert len(headers) == 2 and tail.records[headers[1]]["resumed_from_step"] == newest
    after = _steps(tail.records[headers[1] :])
    assert [s["step"] for s in after] == list(range(newest + 1, 41))
    assert tail.records[-1]["type"] == "end" and tail.records[-1]["status"] == "completed"
    assert f"resuming from step {newest}" in out
    assert not (run_dir / "checkpoints" / ".staging").exists()


def test_sigterm_ends_with_an_interrupted_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "train.max_steps=500", "eval.task=none", "checkpoint.every=0")
    tail = Tail(run_dir / "metrics.jsonl")
    _wait_for_step(proc, tail, 3)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    tail.poll()
    end = tail.records[-1]
    assert end["type"] == "end" and end["status"] == "interrupted" and 3 <= end["step"] < 500


def test_wandb_offline_logs_the_run(tmp_path: Path) -> None:
    run_dir, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    wandb_dir.mkdir()
    proc = _start(
        run_dir,
        "train.max_steps=4",
        "eval.interval=2",
        "checkpoint.every=0",
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"},
    )
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    header = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert header["wandb"]["mode"] == "offline" and header["wandb"]["id"] and header["wandb"]["url"] is None
    runs = list(wandb_dir.rglob(f"offline-run-*-{header['wandb']['id']}"))
    assert runs and list(runs[0].glob("*.wandb"))
    assert (runs[0] / "files").is_dir()
