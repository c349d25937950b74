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


def _wandb_run(tmp_path: Path, name: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """The tiny recipe for 2 steps with HOME's secrets file holding a W&B key W&B refuses (too short: W&B
    refuses it before any network), sourced into the environment as a job's cmd.sh does."""
    home = tmp_path / "home"
    (home / ".config" / "pippa").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "pippa" / "secrets.env").write_text("WANDB_API_KEY='stale0key'\n")
    run_dir = tmp_path / name
    argv = [
        sys.executable,
        "-m",
        "training_core.train",
        "tiny",
        "--run-dir",
        str(run_dir),
        "--set",
        "train.max_steps=2",
        "--set",
        "logging.progress=false",
    ]
    base = {"PATH": "/usr/bin:/bin", "HOME": str(home), "WANDB_API_KEY": "stale0key", "WANDB_SILENT": "true"}
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env={**base, **env})
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return p, lines


def test_a_refused_wandb_key_names_its_file_and_how_to_run_offline(tmp_path: Path) -> None:
    p, lines = _wandb_run(tmp_path, "online")
    assert p.returncode == 1, p.stderr[-2000:]
    error = lines[-1]["error"]
    where = "W&B refused WANDB_API_KEY from ~/.config/pippa/secrets.env (pippa up copies it"
    assert error.startswith(where), error
    assert "WANDB_MODE=offline" in error and "delete the line" in error and "stale0key" not in error


def test_the_main_job_on_local_stays_offline_with_a_key_unless_the_run_asks(tmp_path: Path) -> None:
    p, lines = _wandb_run(tmp_path, "local", PIPPA_WANDB_DEFAULT="offline")  # as the host local runs it
    assert p.returncode == 0, p.stderr[-2000:]
    assert lines[0]["wandb"]["mode"] == "offline" and lines[-1]["status"] == "completed"
