"""The code recipes run a few real TRL steps on the tiny model on CPU (their [platform.cpu] preset),
the MBPP callback logs its eval lines and per-problem JSON, and the game's opponent works end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training_core.hardware.platform import PlatformFacts
from training_core.rewards import registry
from training_core.train import main as train_main

ROWS = [
    {
        "task_id": 12,
        "text": "Write a function to add the constant K.",
        "code": "def add_k(x):\n    return x + K",
        "test_list": ["assert add_k(1) == 4"],
        "test_setup_code": "K = 3",
        "challenge_test_list": [],
    },
    {
        "task_id": 13,
        "text": "Write a function to square.",
        "code": "def sq(x):\n    return x * x",
        "test_list": ["assert sq(2) == 4"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]


def lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.slow
def test_code_execution_recipe_trains_and_logs_mbpp_eval(tmp_path: Path, offline: None) -> None:
    rows = tmp_path / "mbpp.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run_dir = tmp_path / "run"
    cb = "callbacks.mbpp_eval"
    code = train_main(
        [
            "code_execution",
            "--run-dir",
            str(run_dir),
            "--set",
            "train.max_steps=2",
            "--set",
            f"{cb}.data_files={rows}",
            "--set",
            f"{cb}.config=full",
            "--set",
            f"{cb}.interval=1",
            "--set",
            f"{cb}.max_new_tokens=8",
        ],
        facts=PlatformFacts(),
    )
    assert code == 0
    got = lines(run_dir)
    steps = [x for x in got if x["type"] == "step"]
    assert len(steps) == 2 and all(-1.0 <= x["reward/code_execution"] <= 1.0 for x in steps)
    evals = [x for x in got if x["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 1, 2]  # start, every step, end (not twice at the end)
    assert evals[0]["mbpp_eval/total_problems"] == 2 and "mbpp_eval/eval_time" in evals[0]
    assert {"mbpp_eval/pass_rate", "mbpp_eval/problems_passed"} <= evals[-1].keys()
    per_problem = json.loads((run_dir / "mbpp_eval" / "step-2.json").read_text())
    assert [p["task_id"] for p in per_problem["problems"]] == [12, 13]
    assert got[-1]["type"] == "end" and got[-1]["status"] == "completed"


@pytest.mark.slow
def test_code_game_recipe_trains_on_cpu(tmp_path: Path, offline: None) -> None:
    run_dir = tmp_path / "game"
    assert (
        train_main(
            ["code_game", "--run-dir", str(run_dir), "--set", "train.max_steps=2"], facts=PlatformFacts()
        )
        == 0
    )
    steps = [x for x in lines(run_dir) if x["type"] == "step"]
    assert len(steps) == 2 and all(-1.0 <= x["reward/code_game"] <= 1.0 for x in steps)


@pytest.mark.slow
def test_code_tests_recipe_trains_on_cpu(
    tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "tests"
    assert (
        train_main(
            ["code_tests", "--run-dir", str(run_dir), "--set", "train.max_steps=1"], facts=PlatformFacts()
        )
        == 0
    )
    steps = [x for x in lines(run_dir) if x["type"] == "step"]
    assert len(steps) == 1 and 0.0 <= steps[0]["reward/test_cases"] <= 2.0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sandbox: ")]
    # the log's line is short (it was ~2,000 characters: the whole filter); sandbox.txt has it all
    assert len(header) == 1 and header[0].startswith("sandbox: bwrap") and len(header[0]) < 160, header
    assert "(isolation = " in header[0] and "seccomp filter" in header[0]
    details = (run_dir / "sandbox.txt").read_text()
    assert "seccomp (libseccomp" in details and "memfd_create" in details and "fcntl: lock" in details


def test_a_sandbox_refusal_comes_before_the_model_loads_in_one_short_line(
    tmp_path: Path, offline: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host that cannot give code_tests strict isolation (here: no Landlock): the run fails before the
    model loads (it loaded it first: seconds on a real model), its error is one short line, the details
    are in the run's sandbox.txt, and the run still records its failed start."""
    from training_core.sandbox import isolation, pool, procview

    monkeypatch.setattr(procview, "landlock_abi", lambda: 0)
    monkeypatch.setattr(isolation, "_cached", None)
    monkeypatch.setattr(pool, "_default", None)  # this process's pool (an earlier test made one)
    import training_core.models as models

    def no_model(*a: object, **k: object) -> None:
        raise AssertionError("the model loaded before the sandbox was found")

    monkeypatch.setattr(models, "load_model", no_model)
    run_dir = tmp_path / "refused"
    assert (
        train_main(
            ["code_tests", "--run-dir", str(run_dir), "--set", "train.max_steps=1"], facts=PlatformFacts()
        )
        == 1
    )
    (error,) = [ln for ln in capsys.readouterr().err.splitlines() if "no sandbox" in ln]
    assert len(error) < 300 and "no Landlock" in error and "fix: " in error, error
    assert "fixes: " in (run_dir / "sandbox.txt").read_text()
    assert [x["status"] for x in lines(run_dir) if x["type"] == "end"] == ["failed"]


def test_code_game_opponent_is_a_frozen_copy_and_accuracy_is_logged() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.models import tiny

    path = tiny.ensure()
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    ctx = registry.RewardContext(model=model, tokenizer=tok)
    game = registry.build(
        "code_game", {"prefix": "print(", "opponent_prompt": "{code}\n=", "max_new_tokens": 3}, ctx
    )
    accuracy = registry.build("code_game_opponent_accuracy", {}, ctx)
    assert game.__name__ == "code_game"
    completions = ["12)", "1+1)", "x)", "7"]  # print(12), print(1+1), NameError, syntax error
    rewards = game(completions)
    hits = accuracy(completions)
    assert rewards[2:] == [-1.0, -1.0] and hits[2:] == [None, None]
    for r, h in zip(rewards[:2], hits[:2], strict=True):
        assert (r, h) in ((1.0, 0.0), (-1.0, 1.0))
    assert all(p.requires_grad for p in model.parameters())  # the policy itself stays trainable


def test_eval_cli_task_mbpp_prints_pass_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training_core.eval.cli import main as eval_main

    rows = tmp_path / "mbpp.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert (
        eval_main(
            [
                "tiny",
                "--task",
                "mbpp",
                "-n",
                "2",
                "--max-new-tokens",
                "4",
                "--set",
                f"eval.params.data_files={rows}",
                "--set",
                "eval.params.config=full",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "mbpp" and out["mbpp_eval/total_problems"] == 2
    assert out["mbpp_eval/pass_rate"] == out["accuracy"]
    assert "You are an expert Python programmer" in out["results"][0]["prompt"]
