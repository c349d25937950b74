"""Failure classes driving the retry, with the real trainer on a loopback OpenSSH host in real tmux:

- two gloo ranks, one of which stops calling the collectives (training_core.run.testhooks): detected as
  stalled with no --stall-timeout (the floor lowered by PIPPA_STALL_FLOOR_S), both ranks' stacks in the
  forensics, ``pippa why`` names the rank not in the collective, and the retry completes the run;
- a real ``torch.OutOfMemoryError`` above a per-device batch: retried with half the batch and twice the
  accumulation, and completes, one row per step; a ``--cmd`` job printing a CUDA OOM traceback is ``oom``.

The test settings reach the host's supervisor and trainer through its secrets file (cmd.sh exports it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_restart_ssh import attempts, pippa, records, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
FLOOR_S = 30  # (5 min on a real host; well above a step of this run even on a loaded 2-core machine)
SMALL = [
    "--set",
    "train.per_device_train_batch_size=32",
    "--set",
    "train.num_generations=8",
    "--set",
    "eval.interval=1000",
    "--set",
    "checkpoint.every=2",
]


@pytest.fixture
def host_env(ssh_hosts: list[Any]) -> Iterator[Any]:
    """``put(h, **vars)``: exported to the host's runs through its secrets file (removed after)."""
    written: list[Path] = []

    def put(h: Any, **values: str) -> None:
        f = h.home / ".config" / "pippa" / "secrets.env"
        h.run_as_user(["mkdir", "-p", str(f.parent)]).check_returncode()  # the user's, as `pippa up` makes it
        f.write_text("".join(f"{k}='{v}'\n" for k, v in values.items()))
        os.chmod(f, 0o600)
        os.chown(f, h.uid, -1)
        written.append(f)

    yield put
    for f in written:
        f.unlink(missing_ok=True)


def _ended(run_dir: Path, timeout: float = 400) -> None:
    log = run_dir / "output.log"
    wait_for(
        lambda: (run_dir / "exit_code").exists(),
        timeout,
        lambda: log.read_text()[-3000:] if log.exists() else "",
    )


def test_a_rank_that_leaves_the_collective_is_found_stalled_named_and_retried(
    client_env, ssh_hosts, host_env
) -> None:
    env, h = client_env.env, ssh_hosts[2]
    once = h.home / "hang-once"
    once.unlink(missing_ok=True)
    host_env(
        h,
        PIPPA_TEST_HANG_RANK="1",
        PIPPA_TEST_HANG_AT_STEP="4",
        PIPPA_TEST_HANG_ONCE=str(once),
        PIPPA_STALL_FLOOR_S=str(FLOOR_S),
    )
    run_id = started(
        pippa(
            env,
            "run",
            "tiny",
            "--host",
            h.name,
            "--name",
            "rhang",
            "--retry",
            "1",
            "--backoff",
            "1s",
            "--set",
            "launch.processes=2",
            "--set",
            "train.max_steps=6",
            *SMALL,
        )
    )
    run_dir = h.home / "pippa" / "runs" / run_id
    log = run_dir / "output.log"
    wait_for(once.exists, 400, lambda: log.read_text()[-3000:] if log.exists() else "")
    hung_at = time.time()
    wait_for(
        lambda: attempts(run_dir) and attempts(run_dir)[0].get("class"), 300, lambda: log.read_text()[-3000:]
    )
    first = attempts(run_dir)[0]
    assert first["class"] == "stalled", first
    threshold = first["stall_threshold_s"]
    assert threshold <= max(5 * 2.0, FLOOR_S)  # the run's own step times (well under 2 s) and the floor
    detected = first["forensics"]["captured_at"]
    assert detected - hung_at <= threshold + 30
    out = run_dir / first["forensics"]["dir"]
    procs = json.loads((out / "processes.json").read_text())
    assert sorted(p["rank"] for p in procs if p["rank"] is not None) == [0, 1]
    assert all(p["stack"] and (out / p["stack"]).is_file() for p in procs if p["rank"] is not None), procs

    why = pippa(env, "why", "rhang", "--host", h.name, "--json")
    assert why.returncode == 0, why.stderr
    told = json.loads(why.stdout)["attempts"][0]
    assert told["cls"] == "stalled" and told["suspect"].startswith("rank 1 is not in the collective")
    assert "wander_off" in told["suspect"]

    _ended(run_dir)
    assert (run_dir / "exit_code").read_text() == "0\n", log.read_text()[-3000:]
    seen = [(r.get("type"), r.get("step"), r.get("resumed_from_step")) for r in records(run_dir)]
    assert steps(run_dir) == list(range(1, 7)), (seen, attempts(run_dir), log.read_text()[-4000:])
    first, second = attempts(run_dir)
    assert second["class"] == "completed" and first["decision"]["spends"] == "infra"


def test_an_oom_is_retried_with_half_the_batch_and_completes(client_env, ssh_hosts, host_env) -> None:
    env, h = client_env.env, ssh_hosts[2]
    host_env(h, PIPPA_TEST_OOM_ABOVE_BATCH="16")
    run_id = started(
        pippa(
            env,
            "run",
            "tiny",
            "--host",
            h.name,
            "--name",
            "room",
            "--backoff",
            "1s",
            "--set",
            "train.max_steps=4",
            *SMALL,
        )
    )
    run_dir = h.home / "pippa" / "runs" / run_id
    _ended(run_dir)
    log = (run_dir / "output.log").read_text()
    assert (run_dir / "exit_code").read_text() == "0\n", log[-3000:]
    first, second = attempts(run_dir)
    assert first["class"] == "oom" and "CUDA out of memory" in first["reason"]
    assert first["decision"]["batch"] == [16, 2] and second["class"] == "completed"
    assert "per-device batch 32 -> 16, gradient accumulation 1 -> 2" in log
    headers = [r for r in records(run_dir) if r.get("type") == "header"]
    train = headers[-1]["config"]["config"]["train"]
    assert (train["per_device_train_batch_size"], train["gradient_accumulation_steps"]) == (16, 2)
    assert steps(run_dir) == [1, 2, 3, 4]  # one row per step
    ps = json.loads(pippa(env, "ps", "--host", h.name, "--json").stdout)[h.name]["runs"]
    assert next(r for r in ps if r["run_id"] == run_id)["state_text"].startswith("finished")


CUDA_OOM_JOB = (
    "python3 -c \"import sys; print('Traceback (most recent call last):'); "
    "print('  File \\\"train.py\\\", line 9, in <module>'); "
    "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 3.94 MiB is free.'); sys.exit(1)\""
)


def test_a_command_printing_a_cuda_oom_is_classed_oom(client_env, ssh_hosts) -> None:
    env, h = client_env.env, ssh_hosts[2]
    run_id = started(
        pippa(env, "run", "--cmd", CUDA_OOM_JOB, "--host", h.name, "--name", "coom", "--retry", "1")
    )
    run_dir = h.home / "pippa" / "runs" / run_id
    _ended(run_dir, 60)
    (only,) = attempts(run_dir)  # a --cmd run has no batch to halve: not retried
    assert only["class"] == "oom" and only["reason"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    why = pippa(env, "why", "coom", "--host", h.name)
    assert why.returncode == 0 and "attempt 1/2  oom (torch.OutOfMemoryError" in why.stdout


def test_why_of_an_unknown_run_is_one_line_and_not_zero(client_env, ssh_hosts) -> None:
    p = pippa(client_env.env, "why", "no-such-run", "--host", ssh_hosts[2].name)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "no-such-run" in p.stderr
