"""Failure classes as exit statuses (pippa_contract.exitcodes): every infrastructure class ends the run's
process tree (the host supervisor, as cmd.sh runs it) with its own status, and a loop outside that
retries only those statuses completes the run.

The real tiny trainer on the CPU, under the real supervisor, faults injected with training_core's test
hooks: a time limit (SIGUSR1 while the run waits at a step, as SLURM's ``--signal=B:USR1`` sends it),
then a stall (the rank leaves the loop), then the run completes, one metrics row per step, with
``--retry 0``. The classes the supervisor decides from a job's log or the kernel (nccl, gpu-fault), a
lost session and a preemption: with small jobs (``--cmd`` runs) for the same supervisor.
"""

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

from pippa_contract import exitcodes as ec
from pippa_contract import failures as fc

REPO = Path(__file__).resolve().parents[2]
SUPERVISE = "import sys; from pippa_agent.supervise import supervise; sys.exit(supervise(sys.argv[1]))"
# the kernel's own line for a GPU that fell off the bus, printed by a dmesg first on the job's PATH
XID_DMESG = """#!/bin/sh
up=$(cut -d' ' -f1 /proc/uptime)
echo "[$up] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
"""


def _run_dir(tmp: Path, command: str, *, recipe: str | None, **restart: Any) -> Path:
    run_dir = tmp / "runs" / f"20260101-120000-{recipe or 'cmd'}-abcd"
    run_dir.mkdir(parents=True)
    policy = {"max_attempts": 1, "infra_retries": 0, "backoff_s": 0, "grace_s": 5, **restart}
    meta = {"run_id": run_dir.name, "recipe": recipe, "command": command, "restart": policy}
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


def _supervise(run_dir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The supervisor as cmd.sh runs it (output into output.log, as cmd.sh's tee does)."""
    log = open(run_dir / "output.log", "ab")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISE, str(run_dir)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _attempts(run_dir: Path) -> list[dict[str, Any]]:
    return list(json.loads((run_dir / "attempts.json").read_text())["attempts"])


def _wait_for(what: Any, timeout: float, run_dir: Path) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        log = (run_dir / "output.log").read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log
        time.sleep(0.2)


def test_the_table_gives_each_infrastructure_class_its_own_status_clear_of_common_ones() -> None:
    assert set(ec.INFRA_EXIT) == {"lost", "nccl", "stalled", "gpu-fault", "timelimit", "preempted"}
    codes = list(ec.INFRA_EXIT.values())
    assert len(set(codes)) == len(codes)
    taken = {0, 1, 2, *range(64, 79), 124, 125, 126, 127, 128, *range(129, 129 + 64)}
    assert not set(codes) & taken
    assert not set(codes) & set(ec.USER_EXIT.values())
    assert all(ec.class_of_exit(ec.tree_exit(c, 1)) == c for c in ec.INFRA_EXIT)
    assert ec.tree_exit(fc.CRASH, 1) == 1 and ec.tree_exit(fc.CONFIG, 2) == 2


@pytest.mark.slow
def test_a_time_limit_and_a_stall_end_the_tree_with_their_statuses_and_a_loop_outside_completes_the_run(
    tmp_path: Path,
) -> None:
    pause_once, hang_once = tmp_path / "paused", tmp_path / "hung"
    run_dir = tmp_path / "runs" / "20260101-120000-tiny-abcd"
    command = (
        f"{sys.executable} -m training_core.launch tiny --run-dir {run_dir} --set train.max_steps=6 "
        "--set checkpoint.every=1 --set eval.interval=1000 --set train.per_device_train_batch_size=8 "
        "--set train.num_generations=4"
    )
    run_dir = _run_dir(tmp_path, command, recipe="tiny", stall_timeout_s=20)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ACCELERATE_"))}
    env.update(
        PYTHONPATH=str(REPO),
        CUDA_VISIBLE_DEVICES="",
        PIPPA_RUN_DIR=str(run_dir),
        PIPPA_TEST_PAUSE_AT_STEP="2",
        PIPPA_TEST_PAUSE_ONCE=str(pause_once),
        PIPPA_TEST_HANG_RANK="0",
        PIPPA_TEST_HANG_AT_STEP="5",
        PIPPA_TEST_HANG_ONCE=str(hang_once),
    )

    statuses: list[int] = []
    for _ in range(5):  # the loop outside: start again while the status is an infrastructure one
        proc = _supervise(run_dir, env)
        if not statuses:  # the scheduler's warning before the time limit, to the job's batch shell
            _wait_for(pause_once.exists, 400, run_dir)
            proc.send_signal(signal.SIGUSR1)
        statuses.append(proc.wait(timeout=600))
        if statuses[-1] not in ec.INFRA_CODES:
            break
    log = (run_dir / "output.log").read_text(errors="replace")
    assert statuses == [ec.INFRA_EXIT["timelimit"], ec.INFRA_EXIT["stalled"], 0], log[-4000:]
    attempts = _attempts(run_dir)
    assert [a["class"] for a in attempts] == ["timelimit", "stalled", "completed"], attempts
    assert attempts[1]["resumed_from_step"] is not None and attempts[1]["resumed_from_step"] >= 2
    assert all(a["decision"]["spends"] != "budget" for a in attempts)  # max_attempts 1: --retry 0 unspent
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r.get("type") == "step"]
    assert steps == [1, 2, 3, 4, 5, 6], steps  # one row per step across the three attempts
    assert rows[-1]["type"] == "end" and rows[-1]["status"] == "completed"


def _cmd_tree(tmp_path: Path, job: str, **env_extra: str) -> tuple[int, list[dict[str, Any]], Path]:
    run_dir = _run_dir(tmp_path, job, recipe=None)
    env = {**os.environ, "PIPPA_RUN_DIR": str(run_dir), **env_extra}
    proc = _supervise(run_dir, env)
    return proc.wait(timeout=120), _attempts(run_dir), run_dir


def test_an_nccl_timeout_ends_the_tree_with_the_nccl_status(tmp_path: Path) -> None:
    job = (
        "echo '[rank1]:[E1218 20:27:21.42 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds'; exit 1"
    )
    code, attempts, _ = _cmd_tree(tmp_path, job)
    assert (code, attempts[0]["class"]) == (ec.INFRA_EXIT["nccl"], "nccl")


def test_a_gpu_fault_ends_the_tree_with_the_gpu_fault_status(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text(XID_DMESG)
    (bin_dir / "dmesg").chmod(0o755)
    code, attempts, _ = _cmd_tree(tmp_path, "kill -9 $$", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert (code, attempts[0]["class"]) == (ec.INFRA_EXIT["gpu-fault"], "gpu-fault"), attempts


def test_a_stall_of_a_command_ends_the_tree_with_the_stalled_status(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "echo working; sleep 300", recipe=None, stall_timeout_s=1)
    code = _supervise(run_dir, {**os.environ, "PIPPA_RUN_DIR": str(run_dir)}).wait(timeout=120)
    assert (code, _attempts(run_dir)[0]["class"]) == (ec.INFRA_EXIT["stalled"], "stalled")


@pytest.mark.parametrize(("sig", "cls"), [(signal.SIGUSR2, "preempted"), (signal.SIGUSR1, "timelimit")])
def test_a_save_signal_ends_the_tree_with_its_class_status_and_spends_no_retry(
    tmp_path: Path, sig: int, cls: str
) -> None:
    run_dir = _run_dir(tmp_path, "echo up; sleep 300", recipe=None, max_attempts=3)
    proc = _supervise(run_dir, {**os.environ, "PIPPA_RUN_DIR": str(run_dir)})
    _wait_for(lambda: "up" in (run_dir / "output.log").read_text(), 60, run_dir)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == ec.INFRA_EXIT[cls]
    (attempt,) = _attempts(run_dir)  # not retried in place: the engine that sent it restarts the run
    assert attempt["class"] == cls and attempt["decision"]["retry"] is False


def test_a_lost_session_ends_the_tree_with_the_lost_status(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "echo up; sleep 300", recipe=None)
    proc = _supervise(run_dir, {**os.environ, "PIPPA_RUN_DIR": str(run_dir)})
    _wait_for(lambda: "up" in (run_dir / "output.log").read_text(), 60, run_dir)
    proc.send_signal(signal.SIGHUP)  # tmux kill-session, a reboot
    assert proc.wait(timeout=60) == ec.INFRA_EXIT["lost"]
    assert _attempts(run_dir)[0]["class"] == "lost"


def test_the_contracts_page_holds_the_same_table() -> None:
    text = (REPO / "docs" / "CONTRACTS.md").read_text()
    section = text.split("## Exit statuses by failure class", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[1].isdigit():
            rows[cells[0].strip("`")] = int(cells[1])
    assert rows == {**ec.INFRA_EXIT, **ec.USER_EXIT}
