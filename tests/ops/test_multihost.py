"""One run over two hosts (``pippa run RECIPE --hosts a,b``) on two real loopback SSH hosts: each is
synced and starts one launcher, machine ranks 0 and 1 meet over c10d at the first host and train as one
gloo group of 2 (one process each); ``ps`` shows the run once, ``logs`` is rank 0's, ``stop`` stops both."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def _project(dest: Path) -> Path:
    """A checkout with the real trainer and the probe recipe (what `pippa run` syncs to the hosts)."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "training_core", dest / "training_core", ignore=ignore)
    (dest / "recipes").mkdir()
    shutil.copy(REPO / "recipes" / "base.toml", dest / "recipes")
    shutil.copy(REPO / "tests" / "training" / "probe.toml", dest / "recipes" / "probe.toml")
    (dest / "tests" / "training").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "training" / "dist_probe.py", dest / "tests" / "training")
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "add", "-A"], check=True)
    return dest


def test_one_run_over_two_hosts_trains_as_one_group_and_stops_on_both(
    ssh_hosts: list[Any], client_env: Any, tmp_path: Path
) -> None:
    repo = _project(tmp_path / "proj")
    h1, h2 = ssh_hosts[0], ssh_hosts[1]

    def pippa(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PIPPA, *args], cwd=repo, env=client_env.env, capture_output=True, text=True, timeout=timeout
        )

    p = pippa(
        "run",
        "probe",
        "--hosts",
        f"{h1.name},{h2.name}",
        "--name",
        "mh",
        "--set",
        "train.max_steps=500",
        "--set",
        "checkpoint.every=1000",
    )
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.split()[1]
    assert f"hosts:   {h1.name},{h2.name}" in p.stdout

    def ps() -> dict[str, Any]:
        out = pippa("ps", "--host", h1.name, "--host", h2.name, "--json")
        assert out.returncode == 0, out.stderr
        runs = json.loads(out.stdout)
        return {h: next(r for r in runs[h]["runs"] if r["run_id"] == run_id) for h in (h1.name, h2.name)}

    # Until step 2, each rank is running or, for a moment under load, queued (its session is up and its
    # job has not yet written that it started); any other state is a failure, said at once.
    deadline = time.monotonic() + 300
    while "step 2/500" not in (log := pippa("logs", run_id).stdout):
        assert time.monotonic() < deadline, f"no step 2 in rank 0's log:\n{log[-3000:]}"
        states = {h: r["state"] for h, r in ps().items()}
        assert set(states.values()) <= {"running", "queued"}, (states, log[-3000:])
        time.sleep(1)
    assert ", 2 processes (ddp)" in log  # rank 0 trains in a world of two: the two hosts' ranks
    recs = ps()
    assert [recs[h]["machine_rank"] for h in (h1.name, h2.name)] == [0, 1]
    assert recs[h2.name]["hosts"] == [h1.name, h2.name]
    table = pippa("ps", "--host", h1.name, "--host", h2.name, "-v").stdout  # whole ids
    assert sum(run_id in line for line in table.splitlines()) == 1  # one row for the run
    assert f"{h1.name}+{h2.name}" in table

    s = pippa("stop", run_id, "--grace", "60")
    assert s.returncode == 0, s.stderr
    after = ps()
    assert {r["state"] for r in after.values()} == {"stopped"}, after
    rank0 = [
        json.loads(ln)
        for ln in (h1.home / "pippa" / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    ]
    assert rank0[-1]["type"] == "end" and rank0[-1]["status"] == "interrupted"
    assert not (h2.home / "pippa" / "runs" / run_id / "metrics.jsonl").exists()  # rank 0 records the run
