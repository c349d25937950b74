"""The tictactoe_tiny recipe end to end on CPU in a few seconds: through training_core.train's dispatch,
metrics.jsonl with the self-play keys and eval lines, checkpoints that ``--resume`` continues (one row
per step), the eval CLI on a checkpoint, and a clear refusal of a prompt the tiny model cannot read."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from training_core import train
from training_core.eval import cli as eval_cli

pytestmark = pytest.mark.slow
SHORT = [
    "--set",
    "train.max_steps=3",
    "--set",
    "selfplay.samples_per_step=24",
    "--set",
    "selfplay.parallel_games=8",
    "--set",
    "eval.n=4",
    "--set",
    "eval.interval=2",
    "--set",
    "checkpoint.every=2",
]


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No W&B; one torch thread (a 0.1M-parameter model gains nothing from more, and on a shared
    2-core machine two spinning OpenMP threads made the update ~5x slower)."""
    import torch

    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tiny_selfplay_runs_logs_checkpoints_resumes_and_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "20260101-000000-tictactoe_tiny-abcd"
    assert train.main(["tictactoe_tiny", "--run-dir", str(run_dir), *SHORT]) == 0
    recs = _records(run_dir)
    assert recs[0]["type"] == "header" and recs[0]["config"]["config"]["method"] == "selfplay"
    steps = [r for r in recs if r["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        outcomes = ("game/p0_win", "game/p1_win", "game/draw", "game/p0_invalid", "game/p1_invalid")
        assert sum(s[k] for k in outcomes) == pytest.approx(1.0)
        assert s["game/invalid_rate"] == pytest.approx(s["game/p0_invalid"] + s["game/p1_invalid"])
        assert s["samples/trained"] == 24 and s["game/mean_length"] >= 1
        for key in ("rae/baseline_p0", "rae/baseline_p1", "adv/mean", "adv/std", "loss/total", "grad/norm"):
            assert isinstance(s[key], float), key
        assert s["loss/clip_fraction"] >= 0  # 2 PPO epochs: the clipped loss ran
    evals = [r for r in recs if r["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 3]  # at start, every 2 steps, at the end
    for e in evals:
        for opp in ("random", "minimax"):
            assert e[f"eval/vs_{opp}/games"] == 4
            total = sum(e[f"eval/vs_{opp}/{k}"] for k in ("win", "draw", "loss"))
            assert total == pytest.approx(1.0)
            assert e[f"eval/vs_{opp}/invalid"] <= e[f"eval/vs_{opp}/loss"]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert ckpts == ["checkpoint-2", "checkpoint-3"]  # every 2 and the last step

    # resume from the newest checkpoint (step 3) with a longer budget: one row per step, one end line
    assert (
        train.main(
            ["tictactoe_tiny", "--run-dir", str(run_dir), *SHORT, "--set", "train.max_steps=4", "--resume"]
        )
        == 0
    )
    recs = _records(run_dir)
    assert [r["step"] for r in recs if r["type"] == "step"] == [1, 2, 3, 4]
    assert [r["resumed_from_step"] for r in recs if r["type"] == "header"] == [None, 3]
    assert [r["status"] for r in recs if r["type"] == "end"] == ["completed"]
    assert (run_dir / "metrics.superseded.jsonl").is_file()
    # samples.jsonl: each step's games (a tenth of 3 steps rounds to every step), once each
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").open()]
    assert sorted({r["step"] for r in rows}) == [1, 2, 3, 4] and {r["kind"] for r in rows} == {"selfplay"}
    assert len({(r["step"], r["index"]) for r in rows}) == len(rows)
    for r in rows:
        assert r["transcript"][-1].startswith("result: ") and set(r["rewards"]) == {"p0", "p1"}
        assert r["reward"] == r["rewards"]["p0"] and r["transcript"][0].startswith("p0: ")

    capsys.readouterr()
    ckpt = run_dir / "checkpoints" / "checkpoint-4"
    assert eval_cli.main([str(ckpt), "--task", "tictactoe", "-n", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vs_random"]["games"] == 3 and out["vs_minimax"]["games"] == 3
    assert 0.0 <= out["vs_minimax"]["win"] <= out["vs_minimax"]["p0_win"] + out["vs_minimax"]["p1_win"]


def test_the_spiral_prompt_on_the_tiny_model_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    code = train.main(
        ["tictactoe_tiny", "--run-dir", str(run_dir), *SHORT, "--set", "selfplay.prompt=spiral"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "selfplay.prompt" in err and len(err.strip().splitlines()) == 1
    code = train.main(
        ["tictactoe_tiny", "--run-dir", str(run_dir), *SHORT, "--set", "data.prompt_style=chat"]
    )
    assert code == 2 and "no chat template" in capsys.readouterr().err
    assert _records(run_dir)[-1]["status"] == "failed"


def test_sigterm_saves_the_current_step_and_ends_interrupted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"

    def signal_after_first_step() -> None:
        deadline = time.time() + 120
        while time.time() < deadline:
            if metrics.is_file() and '"type": "step"' in metrics.read_text():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    sender = threading.Thread(target=signal_after_first_step, daemon=True)
    sender.start()
    argv = [
        *SHORT,
        "--set",
        "train.max_steps=200",
        "--set",
        "checkpoint.every=1000",
        "--set",
        "eval.task=none",
    ]
    assert train.main(["tictactoe_tiny", "--run-dir", str(run_dir), *argv]) == 130
    sender.join()
    recs = _records(run_dir)
    last_step = max(r["step"] for r in recs if r["type"] == "step")
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "interrupted" and recs[-1]["step"] == last_step
    assert last_step < 200
    # the step that was running finished and was saved, although no periodic save was due
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"checkpoint-{last_step}"]
