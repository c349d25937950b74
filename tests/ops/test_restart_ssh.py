"""Runs that survive the night, with the real trainer: a real tiny TRL run on a loopback OpenSSH host
(tests/sshd.py) in real tmux, killed with SIGKILL or frozen with SIGSTOP once it has a checkpoint; its
host-side supervisor resumes it from the newest checkpoint and it completes with one row per step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
STEPS = 8
# Few steps, a checkpoint every 2, no eval: the cheapest run that has something to resume from.
SETS = ["--set", f"train.max_steps={STEPS}", "--set", "checkpoint.every=2", "--set", "eval.interval=1000"]


def pippa(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def started(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr
    return next(line.split()[1] for line in p.stdout.splitlines() if line.startswith("started "))


def wait_for(predicate: Any, timeout: float, why: Any = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {why() if callable(why) else why}"
        time.sleep(0.1)


def records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    path = run_dir / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in records(run_dir) if r.get("type") == "step"]


def trainer_pid(run_id: str) -> int | None:
    """The trainer process of the run (one process: the launcher execs ``-m training_core.train``)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(b"training_core.") for a in argv) and any(run_id.encode() in a for a in argv):
            return int(pid)
    return None


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "attempts.json"
    return list(json.loads(path.read_text())["attempts"]) if path.exists() else []


def held_at_step_4_once(client_env: Any, host: Any, tag: str) -> Path:
    """The first attempt of runs on ``host`` waits at the end of step 4, before its metrics row, until
    it is stopped or killed (training_core.run.testhooks): on an idle machine the whole 8-step run takes
    under a second and could end before the test's kill; the next attempt runs through. The file
    returned exists once the first attempt waits there (kill it only then)."""
    inv = client_env.personal_inventory
    head = f"[hosts.{host.name}]\n"
    once = host.home / f"paused-{tag}"
    env = f'env = {{ PIPPA_TEST_PAUSE_AT_STEP = "4", PIPPA_TEST_PAUSE_ONCE = "{once}" }}\n'
    inv.write_text(inv.read_text().replace(head, head + env))
    return once


def at_a_checkpoint_and_past_it(run_dir: Path) -> bool:
    """Step 3 logged with checkpoint-2 saved: a kill now loses step 3, which the resume redoes."""
    return (run_dir / "checkpoints" / "checkpoint-2").is_dir() and max(steps(run_dir), default=0) >= 3


def superseded(run_dir: Path) -> list[int]:
    return [r["step"] for r in records(run_dir, "metrics.superseded.jsonl") if r.get("type") == "step"]


def finished(env: dict[str, str], host: str, run_id: str, run_dir: Path) -> dict[str, Any]:
    wait_for(
        lambda: (run_dir / "exit_code").exists(), 300, lambda: (run_dir / "output.log").read_text()[-3000:]
    )
    assert (run_dir / "exit_code").read_text() == "0\n", (run_dir / "output.log").read_text()[-3000:]
    assert steps(run_dir) == list(range(1, STEPS + 1))  # one row per step
    (end,) = [r for r in records(run_dir) if r.get("type") == "end"]
    assert end["status"] == "completed"
    p = pippa(env, "ps", "--host", host, "--json")
    (rec,) = [r for r in json.loads(p.stdout)[host]["runs"] if r["run_id"] == run_id]
    assert rec["state_text"] == "finished (exit 0)"
    return rec


def test_a_killed_trainer_resumes_from_its_newest_checkpoint_and_completes(client_env, ssh_hosts) -> None:
    env, h = client_env.env, ssh_hosts[2]
    held = held_at_step_4_once(client_env, h, "killed")
    run_id = started(
        pippa(
            env, "run", "tiny", "--host", h.name, "--name", "rkill", "--retry", "2", "--backoff", "1s", *SETS
        )
    )
    run_dir = h.home / "pippa" / "runs" / run_id
    wait_for(
        lambda: at_a_checkpoint_and_past_it(run_dir) and held.exists(),
        300,
        lambda: (run_dir / "output.log").read_text(),
    )
    pid = trainer_pid(run_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    before = steps(run_dir)  # what the killed attempt logged
    wait_for(lambda: len(attempts(run_dir)) == 2, 30)
    first, second = attempts(run_dir)
    assert second["start"] - first["end"] <= 1 + 5  # restarted within backoff + 5 s
    finished(env, h.name, run_id, run_dir)
    first, second = attempts(run_dir)
    assert (first["outcome"], first["exit_code"]) == ("failed", 137)
    assert first["reason"].startswith("killed by SIGKILL")
    (resumed,) = [r for r in records(run_dir) if r.get("type") == "header" and r.get("resumed_from_step")]
    assert (
        second["outcome"] == "completed" and second["resumed_from_step"] == resumed["resumed_from_step"] >= 2
    )
    assert superseded(run_dir) == [s for s in before if s > second["resumed_from_step"]]  # kept, not lost
    log = (run_dir / "output.log").read_text()
    assert f"pippa: ===== attempt 2/3 from step {second['resumed_from_step']} =====" in log


def test_a_frozen_trainer_is_detected_stopped_resumed_and_completes(client_env, ssh_hosts) -> None:
    env, h = client_env.env, ssh_hosts[2]
    held = held_at_step_4_once(client_env, h, "frozen")
    run_id = started(
        pippa(
            env,
            "run",
            "tiny",
            "--host",
            h.name,
            "--name",
            "rstall",
            "--retry",
            "1",
            "--stall-timeout",
            "5s",
            "--backoff",
            "1s",
            *SETS,
        )
    )
    run_dir = h.home / "pippa" / "runs" / run_id
    wait_for(
        lambda: at_a_checkpoint_and_past_it(run_dir) and held.exists(),
        300,
        lambda: (run_dir / "output.log").read_text(),
    )
    pid = trainer_pid(run_id)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # a hang: alive, silent
    frozen_at = time.time()
    wait_for(lambda: len(attempts(run_dir)) == 2, 60, lambda: (run_dir / "output.log").read_text()[-2000:])
    first, _ = attempts(run_dir)
    assert first["end"] - frozen_at <= 5 + 10  # a stall ends within stall-timeout + 10 s
    finished(env, h.name, run_id, run_dir)
    first, second = attempts(run_dir)
    assert (first["outcome"], first["reason"]) == ("stalled", "no new metrics line for 5s")
    assert second["outcome"] == "completed" and second["resumed_from_step"] >= 2


def test_a_run_whose_tmux_server_died_is_lost_and_recover_completes_it(client_env, ssh_hosts) -> None:
    env, h = client_env.env, ssh_hosts[2]
    held = held_at_step_4_once(client_env, h, "lost")
    run_id = started(pippa(env, "run", "tiny", "--host", h.name, "--name", "rlost", "--retry", "1", *SETS))
    run_dir = h.home / "pippa" / "runs" / run_id
    wait_for(
        lambda: at_a_checkpoint_and_past_it(run_dir) and held.exists(),
        300,
        lambda: (run_dir / "output.log").read_text(),
    )
    h.run_as_user(["tmux", "kill-server"])  # a reboot, an OOM killer taking tmux: no exit code
    wait_for(lambda: trainer_pid(run_id) is None, 30)
    p = pippa(env, "ps", "--host", h.name, "--json")
    (rec,) = [r for r in json.loads(p.stdout)[h.name]["runs"] if r["run_id"] == run_id]
    assert (rec["state"], rec["state_text"], rec["exit_code"]) == ("lost", "lost", None)
    assert "lost" in pippa(env, "ps", "--host", h.name).stdout

    r = pippa(env, "recover", h.name)
    assert r.returncode == 0, r.stderr
    assert f"{h.name}: resumed {run_id} in session rlost (attempt 2/2, from checkpoint-" in r.stdout
    finished(env, h.name, run_id, run_dir)
    first, second = attempts(run_dir)
    assert (first["outcome"], second["outcome"]) == ("lost", "completed")
    assert second["resumed_from_step"] >= 2


def rank_pid(run_id: str, rank: int) -> int | None:
    """The trainer process of ``rank`` (its LOCAL_RANK) among the run's gloo ranks."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = b"training_core.train" in argv and any(run_id.encode() in a for a in argv)
        if mine and f"LOCAL_RANK={rank}".encode() in environ:
            return int(pid)
    return None


def test_a_killed_rank_fails_the_attempt_for_both_and_the_retry_restarts_the_group(client_env, ssh_hosts):
    env, h = client_env.env, ssh_hosts[2]
    args = ("--processes", "2", "--retry", "1", "--backoff", "1s", *SETS)
    run_id = started(pippa(env, "run", "tiny", "--host", h.name, "--name", "rrank", *args))
    run_dir = h.home / "pippa" / "runs" / run_id
    wait_for(lambda: at_a_checkpoint_and_past_it(run_dir), 400, lambda: (run_dir / "output.log").read_text())
    pid = rank_pid(run_id, 1)
    assert pid is not None and rank_pid(run_id, 0) is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(attempts(run_dir)) == 2, 120, lambda: (run_dir / "output.log").read_text()[-3000:])
    first, _ = attempts(run_dir)
    assert first["outcome"] == "failed" and first["exit_code"] != 0  # rank 0 did not train on alone
    finished(env, h.name, run_id, run_dir)
    first, second = attempts(run_dir)
    assert second["outcome"] == "completed" and second["resumed_from_step"] >= 2
    assert len(list((run_dir / "checkpoints").glob(f"checkpoint-{STEPS}/rng_state_*.pth"))) == 2  # both ranks
