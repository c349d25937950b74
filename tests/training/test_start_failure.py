"""A run whose model does not load fails as one line on stderr, a non-zero exit and a failed end line
in its metrics.jsonl (so `pippa ps` / the dashboard see why), with the traceback only under --debug."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _train(run_dir: Path, model: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "training_core.train", "tiny", "--set", f"model.name={model}"]
    return subprocess.run(
        [*argv, "--run-dir", str(run_dir), *extra], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_missing_model_path_is_one_line_and_a_failed_end_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _train(run_dir, str(tmp_path / "no-such-model"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: model path not found: {tmp_path / 'no-such-model'}"
    assert "Traceback" not in proc.stdout + proc.stderr
    header, end = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert header["type"] == "header" and header["run_id"] == "run" and header["recipe"] == "tiny"
    assert end == {**end, "type": "end", "status": "failed", "step": 0}
    assert "model path not found" in end["error"]


def test_unloadable_model_dir_fails_with_one_line_and_debug_adds_the_traceback(tmp_path: Path) -> None:
    not_a_model = tmp_path / "empty-model"
    not_a_model.mkdir()
    proc = _train(tmp_path / "a", str(not_a_model))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: run a failed before its first step: "), lines
    end = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[-1])
    assert end["status"] == "failed" and end["error"] and "\n" not in end["error"]

    debug = _train(tmp_path / "b", str(not_a_model), "--debug")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("error: run b failed before its first step")
