"""``python -m training_core.eval`` prints accuracy and per-problem results as JSON; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_eval_cli_reports_accuracy_and_each_problem() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "training_core.eval", "tiny", "--task", "arithmetic", "-n", "5"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["task"] == "arithmetic" and out["n"] == 5 and len(out["results"]) == 5
    assert 0.0 <= out["accuracy"] <= 1.0 and out["correct"] == sum(r["correct"] for r in out["results"])
    assert {"prompt", "answer", "completion", "correct"} <= set(out["results"][0])


def test_eval_cli_unknown_task_is_one_line() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "training_core.eval", "tiny", "--task", "mbbp"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "unknown eval task 'mbbp'" in p.stderr
