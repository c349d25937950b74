"""``pippa run ... --dry-run`` on the host ``local`` (the real CLI and tmux, test_runs_local's checkout):
it prints the very cmd.sh a launch then writes (only the run id differs: a launch draws its own), the
job's line, every setting of a recipe with its source, and the checks; it starts and writes nothing.
The job.sbatch of a SLURM host: the same, against the test cluster (tests/ops/test_slurm.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_runs_local import FAKE_TRAIN, Local, local_env, started_ids

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    """test_runs_local's checkout: a stand-in trainer, recipe ok_0, its own HOME and tmux server."""
    repo = tmp_path / "proj"
    (repo / "recipes").mkdir(parents=True)
    (repo / "training_core").mkdir()
    (repo / "training_core" / "__init__.py").write_text("")
    (repo / "training_core" / "launch.py").write_text(FAKE_TRAIN)
    (repo / "recipes" / "ok_0.toml").write_text('description = "ends at once"\n')
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    lo = Local(repo, local_env(tmp_path))
    yield lo
    lo.tmux("kill-server")


def _dry(local: Local, *args: str) -> dict[str, Any]:
    p = local.pippa("run", "--host", "local", *args, "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def _nothing_written(local: Local) -> None:
    assert not (local.repo / "runs").exists()
    assert local.tmux("ls").returncode != 0  # no tmux server, no session


def test_a_dry_run_prints_the_cmd_sh_a_launch_then_writes_and_touches_nothing(local: Local) -> None:
    # a plain job and a supervised recipe run
    for args in (
        ["--cmd", "echo 'hi there'; exit 0", "--name", "d1"],
        ["ok_0", "--retry", "1", "--name", "d2"],
    ):
        plan = _dry(local, *args)
        (planned,) = plan["runs"]
        assert planned["file"] == "cmd.sh" and plan["scheduler"] == "tmux"
        text = local.pippa("run", "--host", "local", *args, "--dry-run")
        assert text.returncode == 0 and "dry run: nothing was started" in text.stdout
        _nothing_written(local)

        p = local.pippa("run", "--host", "local", *args, "--no-wait")
        assert p.returncode == 0, p.stderr
        (run_id,) = started_ids(p.stdout)
        written = (local.run_dir(run_id) / "cmd.sh").read_bytes()
        assert written == planned["script"].replace(planned["run_id"], run_id).encode()
        meta = json.loads((local.run_dir(run_id) / "run.json").read_text())
        assert meta["command"] == planned["command"].replace(planned["run_id"], run_id)
        local.wait_state(run_id, lambda r: r["state"] != "running")
        local.tmux("kill-server")
        subprocess.run(["rm", "-rf", str(local.repo / "runs")], check=True)


def test_a_dry_run_lists_every_setting_with_its_source() -> None:
    runs = REPO / "runs"
    before = sorted(runs.iterdir()) if runs.exists() else None
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pippa_ops",
            "run",
            "tiny",
            "--host",
            "local",
            "--dry-run",
            "--json",
            "--set",
            "train.learning_rate=2e-5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    (planned,) = json.loads(p.stdout)["runs"]
    got = {s["key"]: (s["value"], s["source"]) for s in planned["settings"]}
    assert got["train.learning_rate"] == (2e-5, "--set")
    assert got["train.max_steps"][1] == "recipes/tiny.toml"
    assert got["train.loss_type"] == ("dr_grpo", "recipes/base.toml")
    assert got["model.precision"] == ("fp32", "auto (cpu)")
    assert got["train.epsilon"][1] == "default"
    assert (sorted(runs.iterdir()) if runs.exists() else None) == before


def test_a_dry_run_refuses_bad_input_in_one_line(local: Local) -> None:
    p = local.pippa("run", "--host", "local", "nope", "--dry-run")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "unknown recipe" in p.stderr
    _nothing_written(local)
