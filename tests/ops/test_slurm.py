"""Runs on a SLURM cluster, against a real single-node SLURM (tests/slurm.py, one per session): the
sbatch script pippa writes, and the host agent's ``slurm_submit`` / ``list_runs`` / ``slurm_stop``
called on this machine as the login node. The jobs run the real launcher and trainer on the tiny model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import slurm

from pippa_ops.errors import BadSetting
from pippa_ops.runs.slurm import SlurmSpec, launch_words, render_sbatch
from pippa_ops.transport import agent

REPO = Path(__file__).resolve().parents[2]
PROBE_RECIPE = REPO / "tests" / "training" / "probe.toml"  # the tiny model, few steps, a rank probe

PY = [sys.executable]


def test_the_script_asks_for_what_the_host_entry_says_and_quotes_every_value() -> None:
    spec = SlurmSpec(partition="gpu", account="rl-team", time="04:00:00", nodes=2, gpus_per_node=8)
    command = launch_words(PY, "max_gpu", "/scratch/p/runs/r1", [("train.learning_rate", "1e-5; rm -rf ~")])
    text = render_sbatch(spec, "r1", "/scratch/p", command, {"HF_HOME": "/scratch/hf cache"})
    heads = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert [h.removeprefix("#SBATCH ") for h in heads] == [
        "--job-name=r1", "--output=output.log", "--open-mode=append", "--nodes=2", "--ntasks-per-node=1",
        "--partition=gpu", "--account=rl-team", "--time=04:00:00", "--gres=gpu:8"]  # fmt: skip
    assert "'train.learning_rate=1e-5; rm -rf ~'" in text and "HF_HOME='/scratch/hf cache'" in text
    assert '--machine-rank "$SLURM_PROCID"' in text and "scontrol show hostnames" in text
    assert "WANDB_API_KEY" not in text and "secrets.env" in text
    with pytest.raises(BadSetting, match="partition"):
        render_sbatch(SlurmSpec(partition="gpu\n#SBATCH --uid=0"), "r1", "/p", command, {})


# --- a real cluster -----------------------------------------------------------------------------


@pytest.fixture
def site(tmp_path: Path, slurm_cluster: slurm.Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory the jobs run in (the repo's code, linked), and the client commands pointed
    at the test cluster."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("training_core", "recipes", "tests"):
        (proj / name).symlink_to(REPO / name)
    (proj / "probe.toml").write_text(PROBE_RECIPE.read_text())
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PIPPA_CACHE", os.environ["PIPPA_CACHE"])
    yield proj
    jobs = [p.read_text().strip() for p in (proj / "runs").glob("*/slurm_job")]
    if jobs:
        subprocess.run(["scancel", *jobs], env=slurm_cluster.client_env(), capture_output=True)


def submit(proj: Path, run_id: str, spec: SlurmSpec, sets: list[tuple[str, str]], recipe: str = "probe.toml"
           ) -> str:  # fmt: skip
    command = launch_words(PY, str(proj / recipe), f"{proj}/runs/{run_id}", sets)
    script = render_sbatch(spec, run_id, str(proj), command, {"OMP_NUM_THREADS": "1"})
    meta = json.dumps({"run_id": run_id, "host": "cluster", "recipe": recipe, "command": command})
    answer = agent.slurm_submit({"remote_dir": str(proj), "run_id": run_id, "run_json": meta,
                                 "script": script})  # fmt: skip
    return str(answer["job_id"])


def run_of(proj: Path, run_id: str) -> dict[str, Any]:
    runs = agent.list_runs({"remote_dir": str(proj)})["runs"]
    return next(r for r in runs if r["run_id"] == run_id)


def wait(what: str, predicate: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_job_runs_logs_and_stops_with_a_checkpoint_while_a_second_one_is_cancelled_pending(
    site: Path,
) -> None:
    long = [("train.max_steps", "500"), ("checkpoint.every", "1000")]  # saves only when stopped
    job = submit(site, "run-a", SlurmSpec(gpus_per_node=2), long)
    run_dir = site / "runs" / "run-a"
    assert (run_dir / "slurm_job").read_text().strip() == job
    assert "#SBATCH --gres=gpu:2" in (run_dir / "job.sbatch").read_text()
    wait("a training step in output.log", lambda: "step 1/500" in (run_dir / "output.log").read_text()
         if (run_dir / "output.log").exists() else False)  # fmt: skip
    rec = run_of(site, "run-a")
    assert rec["slurm"]["state"] == "RUNNING" and rec["started"] and rec["exit_code"] is None

    # The two fake GPUs are taken: a second job waits for them, and is cancelled before it starts.
    second = submit(site, "run-b", SlurmSpec(gpus_per_node=2), long)
    pending = wait("the second job pending on resources", lambda: run_of(site, "run-b")["slurm"].get(
        "reason") == "Resources" and run_of(site, "run-b"))
    assert pending["slurm"]["state"] == "PENDING" and pending["started"] is None  # fmt: skip
    stopped = agent.slurm_stop({"remote_dir": str(site), "run_id": "run-b", "job_id": second,
                                "stamp": time.time(), "grace_s": 30})  # fmt: skip
    assert stopped == {"was": "PENDING", "cancelled": True}
    b = wait("the cancelled job's state", lambda: run_of(site, "run-b")["slurm"]["state"] == "CANCELLED"
             and run_of(site, "run-b"))  # fmt: skip
    assert b["started"] is None and b["exit_code"] is None and b["stop_requested"]

    # Stop: SIGINT to the job's processes, the trainer saves the step it is on, the job ends.
    stopped = agent.slurm_stop({"remote_dir": str(site), "run_id": "run-a", "job_id": job,
                                "stamp": time.time(), "grace_s": 90})  # fmt: skip
    assert stopped["was"] == "RUNNING" and not stopped["cancelled"]  # it ended by itself, in time
    a = run_of(site, "run-a")
    assert a["exit_code"] == "130" and a["stop_requested"]
    end = records(run_dir)[-1]
    assert end["type"] == "end" and end["status"] == "interrupted"
    assert (run_dir / "checkpoints" / f"checkpoint-{end['step']}").is_dir()
    assert "saving a checkpoint after this step" in (run_dir / "output.log").read_text()


@pytest.mark.slow
def test_a_failing_run_is_a_failed_job_with_its_error_and_a_bad_request_is_refused(site: Path) -> None:
    job = submit(site, "run-bad", SlurmSpec(), [("train.max_steps", "many")])
    rec = wait("the failed job", lambda: run_of(site, "run-bad")["exit_code"] and run_of(site, "run-bad"))
    assert rec["exit_code"] == "2" and "train.max_steps" in rec["error"]
    state = agent.slurm_states([job])[job]
    assert state["state"] == "FAILED" and state["exit_code"] == "2:0"
    with pytest.raises(agent.AgentError, match=r"sbatch failed: .*partition"):
        submit(site, "run-nowhere", SlurmSpec(partition="nosuchpartition"), [])


@pytest.mark.slow
def test_two_srun_tasks_rendezvous_like_two_nodes_and_train_as_one_gloo_group(site: Path) -> None:
    """The multi-node script on one node: two tasks are two launchers (machine ranks 0 and 1) meeting
    over c10d at the first node, one rank each, so one run of world size 2."""
    submit(site, "run-2n", SlurmSpec(tasks_per_node=2), [("train.max_steps", "1"), ("checkpoint.every", "0")])
    run_dir = site / "runs" / "run-2n"
    rec = wait("the 2-task job", lambda: run_of(site, "run-2n")["exit_code"] and run_of(site, "run-2n"), 240)
    assert rec["exit_code"] == "0", (run_dir / "output.log").read_text()[-3000:]
    import torch

    probes = [torch.load(run_dir / f"probe-rank{r}.pt") for r in (0, 1)]
    assert [p["world"] for p in probes] == [2, 2]
    assert all(torch.equal(probes[0]["params"][k], probes[1]["params"][k]) for k in probes[0]["params"])
    assert [r["type"] for r in records(run_dir)] == ["header", "step", "end"]
    assert {p.name for p in run_dir.glob("accelerate*.yaml")} == {"accelerate.machine0.yaml",
                                                                  "accelerate.machine1.yaml"}  # fmt: skip
