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
from projects import make_project

from pippa_agent import runs as agent_runs
from pippa_agent import slurm as agent_slurm
from pippa_contract import errors as agent_errors
from pippa_ops.errors import UsageError
from pippa_ops.hosts.scheduler import SlurmSpec
from pippa_ops.runs.launching.slurm import launch_words, render_sbatch
from pippa_ops.runs.records.listing import slurm_state

REPO = Path(__file__).resolve().parents[2]
PROBE_RECIPE = REPO / "tests" / "training" / "probe.toml"  # the tiny model, few steps, a rank probe

PY = [sys.executable]


# One SLURM cluster per run: the tests that need it share one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("slurm")


def test_the_script_asks_for_what_the_host_entry_says_and_quotes_every_value() -> None:
    spec = SlurmSpec(partition="gpu", account="rl-team", time="04:00:00", nodes=2, gpus_per_node=8)
    command = launch_words(PY, "max_gpu", "/scratch/p/runs/r1", [("train.learning_rate", "1e-5; rm -rf ~")])
    text = render_sbatch(spec, "r1", "/scratch/p", command, {"HF_HOME": "/scratch/hf cache"})
    heads = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert [h.removeprefix("#SBATCH ") for h in heads] == [
        "--job-name=r1",
        "--output=output.log",
        "--open-mode=append",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=rl-team",
        "--time=04:00:00",
        "--gres=gpu:8",
        "--requeue",
        "--signal=B:USR1@90",
    ]  # (a recipe job saves before its time limit)
    assert "'train.learning_rate=1e-5; rm -rf ~'" in text and "HF_HOME='/scratch/hf cache'" in text
    assert '--machine-rank "$SLURM_PROCID"' in text and "scontrol show hostnames" in text
    assert "WANDB_API_KEY" not in text and "secrets.env" in text
    with pytest.raises(UsageError, match="partition"):
        render_sbatch(SlurmSpec(partition="gpu\n#SBATCH --uid=0"), "r1", "/p", command, {})


@pytest.mark.parametrize(
    ("job_state", "exit_code", "started", "stop", "state"),
    [
        ("PENDING", None, False, False, "queued"),
        ("RUNNING", None, True, False, "running"),
        ("COMPLETING", None, True, False, "running"),
        ("CANCELLED", None, False, True, "cancelled"),  # cancelled before it started
        ("CANCELLED", None, True, False, "killed"),
        ("TIMEOUT", None, True, False, "failed"),  # killed by the time limit before the script recorded it
        ("NODE_FAIL", None, True, False, "failed"),
        ("", 0, True, False, "finished"),  # the script recorded the run's end: that is what counts
        ("", 130, True, True, "stopped"),
        ("", 2, True, False, "failed"),
        ("UNKNOWN", None, True, False, "lost"),  # ended long ago, no accounting, no exit code
    ],
)
def test_a_slurm_runs_state_comes_from_its_files_then_from_the_job(
    job_state: str, exit_code: int | None, started: bool, stop: bool, state: str
) -> None:
    assert slurm_state(job_state, exit_code=exit_code, started=started, stop_requested=stop) == state


def test_a_slurm_host_entry_is_checked_where_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pippa_ops.hosts.inventory import load_inventory

    team = tmp_path / "pippa.toml"
    monkeypatch.setenv("PIPPA_INVENTORY", str(team))
    team.write_text(
        '[hosts.cluster]\naddress = "login.example.org"\nremote_dir = "/scratch/me/pippa"\n'
        'scheduler = "slurm"\n[hosts.cluster.slurm]\npartition = "h100"\nnodes = 2\n'
        'gpus_per_node = 8\ntime = "12:00:00"\n'
    )
    spec = load_inventory()["cluster"]
    assert spec.scheduler == "slurm" and spec.slurm == SlurmSpec(
        partition="h100", nodes=2, gpus_per_node=8, time="12:00:00"
    )
    for bad, why in (
        ('scheduler = "pbs"', "scheduler must be one of"),
        ('scheduler = "slurm"\n[hosts.cluster.slurm]\nnodes = "2"', "must be an integer"),
        ('scheduler = "slurm"\n[hosts.cluster.slurm]\ngpus = 8', "unknown key 'gpus'"),
        ("[hosts.cluster.slurm]\nnodes = 2", "scheduler is not"),
    ):
        team.write_text(f'[hosts.cluster]\naddress = "login.example.org"\n{bad}\n')
        with pytest.raises(UsageError, match=why):
            load_inventory()


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


def submit(
    proj: Path, run_id: str, spec: SlurmSpec, sets: list[tuple[str, str]], recipe: str = "probe.toml"
) -> str:
    command = launch_words(PY, str(proj / recipe), f"{proj}/runs/{run_id}", sets)
    script = render_sbatch(spec, run_id, str(proj), command, {"OMP_NUM_THREADS": "1"})
    meta = json.dumps({"run_id": run_id, "host": "cluster", "recipe": recipe, "command": command})
    answer = agent_slurm.slurm_submit(
        {"remote_dir": str(proj), "run_id": run_id, "run_json": meta, "script": script}
    )
    return str(answer["job_id"])


def run_of(proj: Path, run_id: str) -> dict[str, Any]:
    runs = agent_runs.list_runs({"remote_dir": str(proj)})["runs"]
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
    wait(
        "a training step in output.log",
        lambda: (
            "step 1/500" in (run_dir / "output.log").read_text()
            if (run_dir / "output.log").exists()
            else False
        ),
    )
    rec = run_of(site, "run-a")
    assert rec["slurm"]["state"] == "RUNNING" and rec["started"] and rec["exit_code"] is None

    # The two fake GPUs are taken: a second job waits for them, and is cancelled before it starts.
    second = submit(site, "run-b", SlurmSpec(gpus_per_node=2), long)
    pending = wait(
        "the second job pending on resources",
        lambda: run_of(site, "run-b")["slurm"].get("reason") == "Resources" and run_of(site, "run-b"),
    )
    assert pending["slurm"]["state"] == "PENDING" and pending["started"] is None
    stopped = agent_slurm.slurm_stop(
        {"remote_dir": str(site), "run_id": "run-b", "job_id": second, "stamp": time.time(), "grace_s": 30}
    )
    assert stopped == {"was": "PENDING", "cancelled": True}
    b = wait(
        "the cancelled job's state",
        lambda: run_of(site, "run-b")["slurm"]["state"] == "CANCELLED" and run_of(site, "run-b"),
    )
    assert b["started"] is None and b["exit_code"] is None and b["stop_requested"]

    # Stop: SIGINT to the job's processes, the trainer saves the step it is on, the job ends.
    stopped = agent_slurm.slurm_stop(
        {"remote_dir": str(site), "run_id": "run-a", "job_id": job, "stamp": time.time(), "grace_s": 90}
    )
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

    # the job's exit code is in the run dir before slurmctld has finished the job (COMPLETING)
    def ended() -> dict[str, str] | None:
        s = agent_slurm.slurm_states([job])[job]
        return s if s["state"] != "COMPLETING" else None

    state = wait("the job to end", ended)
    assert state["state"] == "FAILED" and state["exit_code"] == "2:0"
    with pytest.raises(agent_errors.AgentError, match=r"sbatch failed: .*partition"):
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
    assert {p.name for p in run_dir.glob("accelerate*.yaml")} == {
        "accelerate.machine0.yaml",
        "accelerate.machine1.yaml",
    }


# --- the laptop side: pippa run / ps / logs / attach / stop on a SLURM login node over SSH --------

SLURM_TOOLS = ("sbatch", "squeue", "scontrol", "scancel", "sacct", "srun", "sinfo")


@pytest.mark.ssh
def test_pippa_runs_ps_logs_attach_and_stops_a_job_on_a_slurm_login_node(
    slurm_cluster: slurm.Cluster, ssh_hosts: list[Any], client_env: Any, tmp_path: Path
) -> None:
    from conftest import PIPPA

    host = ssh_hosts[0]
    for tool in SLURM_TOOLS:  # the cluster's commands on that user's PATH, pointed at the test cluster
        host.install_bin(tool, slurm_cluster.client_wrapper(tool))
    inv = client_env.personal_inventory
    text = inv.read_text().replace(f"[hosts.{host.name}]\n", f'[hosts.{host.name}]\nscheduler = "slurm"\n', 1)
    inv.write_text(text + f'\n[hosts.{host.name}.slurm]\npartition = "debug"\ntime = "00:10:00"\n')
    repo = tmp_path / "repo"
    (repo / "recipes").mkdir(parents=True)
    make_project(repo)

    def pippa(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PIPPA, *args], cwd=repo, env=client_env.env, capture_output=True, text=True, timeout=timeout
        )

    job = "echo hello from slurm on $SLURM_JOB_NODELIST; sleep 120"
    runs = host.home / "pippa" / "runs"
    before = sorted(runs.iterdir()) if runs.exists() else None
    dry = pippa("run", "--host", host.name, "--cmd", job, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    (planned,) = json.loads(dry.stdout)["runs"]
    assert (sorted(runs.iterdir()) if runs.exists() else None) == before  # the dry run wrote nothing there
    p = pippa("run", "--host", host.name, "--cmd", job)
    assert p.returncode == 0, p.stderr
    run_id = next(ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("started "))
    written = (runs / run_id / "job.sbatch").read_bytes()  # the dry run printed these bytes (its own run id)
    assert written == planned["script"].replace(planned["run_id"], run_id).encode()
    assert "(SLURM job " in p.stdout and "session:" not in p.stdout

    def ps() -> dict[str, Any]:
        out = pippa("ps", "--host", host.name, "--json")
        assert out.returncode == 0, out.stderr
        return next(r for r in json.loads(out.stdout)[host.name]["runs"] if r["run_id"] == run_id)

    rec = wait("the job running", lambda: ps()["state"] == "running" and ps())
    assert rec["session"] == f"slurm:{rec['job_id']}" and rec["slurm_state"].startswith("RUNNING")
    wait("its output", lambda: "hello from slurm on " in pippa("logs", run_id, "--host", host.name).stdout)

    a = pippa("attach", run_id, "--host", host.name)
    assert a.returncode == 2 and "batch job" in a.stderr and f"pippa logs {run_id}" in a.stderr

    s = pippa("stop", run_id, "--host", host.name, "--grace", "20")
    assert s.returncode == 0, s.stderr
    final = ps()
    assert final["state"] == "stopped" and final["exit_code"] not in (None, 0), final

    bad = pippa("run", "--host", "local", "--cmd", "true", "--nodes", "2")
    assert bad.returncode == 2 and "--nodes needs a SLURM host" in bad.stderr


def test_retry_on_slurm_renders_a_requeueable_job_that_resumes_on_its_next_attempt(site: Path) -> None:
    """``pippa run --retry 1`` on a SLURM host: the job is ``--requeue``-able, requeues itself after a
    failed attempt (not exit 2, not a stop) and runs later attempts with ``--resume``."""
    run_id, sets = "run-rq", [("train.max_steps", "6"), ("checkpoint.every", "2")]
    command = launch_words(PY, str(site / "probe.toml"), f"{site}/runs/{run_id}", sets)
    script = render_sbatch(SlurmSpec(), run_id, str(site), command, {"OMP_NUM_THREADS": "1"}, retries=1)
    assert "#SBATCH --requeue" in script and 'scontrol requeue "$SLURM_JOB_ID"' in script
    assert '[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && RESUME=--resume' in script
    plain = render_sbatch(SlurmSpec(signal_s=0), run_id, str(site), command, {"OMP_NUM_THREADS": "1"})
    assert "--requeue" not in plain and "scontrol requeue" not in plain
    at_limit = render_sbatch(SlurmSpec(), run_id, str(site), command, {"OMP_NUM_THREADS": "1"})
    assert "#SBATCH --requeue" in at_limit and "failed (exit $code): requeued" not in at_limit  # no --retry


def _trainer_of(run_id: str) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"training_core.train" in argv and any(run_id.encode() in a for a in argv):
            return int(pid)
    return None


@pytest.mark.slow
def test_retry_on_slurm_requeues_the_job_which_resumes_from_its_checkpoint(site: Path) -> None:
    """``pippa run --retry 1`` on the test cluster: the killed attempt requeues the same job, whose next
    attempt (SLURM_RESTART_COUNT 1) resumes from the newest checkpoint and completes, one row per step.
    The first attempt waits at the end of step 3 (training_core.run.testhooks) to be killed: a 6-step tiny
    run is over in a second on an idle machine, and this test used to miss it (2 of 4 runs)."""
    run_id, sets = "run-rq", [("train.max_steps", "6"), ("checkpoint.every", "2")]
    command = launch_words(PY, str(site / "probe.toml"), f"{site}/runs/{run_id}", sets)
    env = {"OMP_NUM_THREADS": "1", "PIPPA_TEST_PAUSE_AT_STEP": "3", "PIPPA_TEST_PAUSE_ONCE": f"{site}/paused"}
    script = render_sbatch(SlurmSpec(), run_id, str(site), command, env, retries=1)
    meta = json.dumps({"run_id": run_id, "host": "cluster", "recipe": "probe.toml", "command": command})
    job = agent_slurm.slurm_submit(
        {"remote_dir": str(site), "run_id": run_id, "run_json": meta, "script": script}
    )["job_id"]
    run_dir = site / "runs" / run_id
    ck = run_dir / "checkpoints" / "checkpoint-2"
    pid = wait(
        "checkpoint-2 and the paused trainer",
        lambda: ck.is_dir() and (site / "paused").exists() and _trainer_of(run_id),
        240,
    )
    os.kill(pid, 9)  # the attempt dies (a host OOM kill, a crash): not a stop
    rec = wait("the end", lambda: run_of(site, run_id)["exit_code"] and run_of(site, run_id), 400)
    log = (run_dir / "output.log").read_text()
    assert rec["exit_code"] == "0", log[-3000:]
    assert "attempt 1/2 failed (exit" in log and "requeued, attempt 2 with --resume" in log

    def ended() -> dict[str, Any] | None:
        s = agent_slurm.slurm_states([str(job)])[str(job)]
        return s if s.get("state") != "COMPLETING" else None

    assert str(wait("the job to end", ended).get("state")) == "COMPLETED"
    steps = [r["step"] for r in records(run_dir) if r["type"] == "step"]
    assert steps == list(range(1, 7))  # resumed from checkpoint-2, not restarted: one row per step


@pytest.mark.slow
def test_a_job_at_its_time_limit_saves_is_requeued_resumes_and_completes_without_spending_retry(
    site: Path,
) -> None:
    """A 2-minute job with ``--signal=B:USR1@30`` and no ``--retry``: its trainer waits at step 3
    (training_core.run.testhooks) until SLURM's USR1 comes before the limit; it saves, exits ``timelimit``,
    the job requeues itself and its next attempt resumes from that checkpoint and completes, one row
    per step. (The one test here that waits for a time limit: it takes over a minute.)"""
    run_id, sets = "run-tl", [("train.max_steps", "6"), ("checkpoint.every", "1000")]  # no periodic save
    command = launch_words(PY, str(site / "probe.toml"), f"{site}/runs/{run_id}", sets)
    env = {"OMP_NUM_THREADS": "1", "PIPPA_TEST_PAUSE_AT_STEP": "3", "PIPPA_TEST_PAUSE_ONCE": f"{site}/paused"}
    script = render_sbatch(SlurmSpec(time="00:02:00", signal_s=30), run_id, str(site), command, env)
    assert "#SBATCH --signal=B:USR1@30" in script and "#SBATCH --time=00:02:00" in script
    meta = json.dumps({"run_id": run_id, "host": "cluster", "recipe": "probe.toml", "command": command})
    job = agent_slurm.slurm_submit(
        {"remote_dir": str(site), "run_id": run_id, "run_json": meta, "script": script}
    )["job_id"]
    run_dir = site / "runs" / run_id
    rec = wait("the end", lambda: run_of(site, run_id)["exit_code"] and run_of(site, run_id), 480)
    log = (run_dir / "output.log").read_text()
    assert rec["exit_code"] == "0", log[-3000:]
    assert "timelimit: stopped after saving, exit 94" in log
    assert "saved before the time limit (exit 94): requeued with --resume (not counted in --retry)" in log
    assert "failed (exit" not in log  # no --retry was asked, and none was spent
    assert (run_dir / "slurm_free_requeues").read_text() == "1\n"
    headers = [r for r in records(run_dir) if r["type"] == "header"]
    assert len(headers) == 2 and headers[1]["resumed_from_step"] >= 3  # from the save at the signal
    steps = [r["step"] for r in records(run_dir) if r["type"] == "step"]
    assert steps == list(range(1, 7))  # one row per step across the requeue

    def ended() -> dict[str, Any] | None:
        s = agent_slurm.slurm_states([str(job)])[str(job)]
        return s if s.get("state") != "COMPLETING" else None

    assert str(wait("the job to end", ended).get("state")) == "COMPLETED"


def test_a_slurm_entry_takes_extra_lines_a_template_and_an_image_and_refuses_bad_ones_in_one_line(
    tmp_path: Path,
) -> None:
    template = tmp_path / "site.sbatch"
    template.write_text(
        "#!/bin/bash\n#SBATCH --qos=normal\n{{pippa_sbatch}}\nmodule load cuda\n{{pippa_job}}\n"
    )
    team = tmp_path / "pippa.toml"
    env = {**os.environ, "PIPPA_INVENTORY": str(team)}
    head = 'scheduler = "slurm"\n[hosts.cluster.slurm]\n'

    def dry(table: str) -> subprocess.CompletedProcess[str]:
        team.write_text(f'[hosts.cluster]\naddress = "login.example.org"\nremote_dir = "/p"\n{head}{table}')
        argv = [sys.executable, "-m", "pippa_ops", "run", "tiny", "--host", "cluster", "--dry-run", "--json"]
        return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    image = 'container_image = "nvcr.io/nv/pt:25.01"\n'
    ok = dry(f'extra = ["#SBATCH --exclusive"]\ntemplate = "{template}"\n{image}')
    assert ok.returncode == 0, ok.stderr
    (planned,) = json.loads(ok.stdout)["runs"]
    script = planned["script"]
    assert planned["file"] == "job.sbatch" and script.startswith("#!/bin/bash\n#SBATCH --qos=normal\n")
    assert "#SBATCH --exclusive\n" in script and "#SBATCH --signal=B:USR1@90\n" in script
    assert script.index("#SBATCH --signal") < script.index("module load cuda") < script.index("srun ")
    assert "srun --kill-on-bad-exit=1 --container-image=nvcr.io/nv/pt:25.01 " in script
    for table, why in (
        ('extra = ["--exclusive"]', "extra line '--exclusive'"),
        ('extra = ["#SBATCH --x=1; rm -rf ~"]', "extra line"),
        (f'template = "{tmp_path / "none"}"', "cannot be read"),
        ('container_image = "a b"', "container_image"),
    ):
        bad = dry(table + "\n")
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert why in bad.stderr and "Traceback" not in bad.stderr
    template.write_text("#!/bin/bash\n{{pippa_job}}\n")
    bad = dry(f'template = "{template}"\n')
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "needs {{pippa_sbatch}} exactly once" in bad.stderr
