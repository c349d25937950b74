"""A run over two loopback SSH hosts (``pippa run RECIPE --hosts a,b --retry 1``) fails and restarts as
one group: rank 1's trainer is killed, rank 0 stops too, both resume from the checkpoint each host kept
(no shared file system: every host saves a whole one) and complete, one metrics row per step; ``why``
names the rank and host that failed first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA
from test_multihost import _project
from test_restart_ssh import attempts, records, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
STEPS = 6


def _rank_trainer(uid: int, run_id: str) -> int | None:
    """The trainer process (``-m training_core.train``, not its launcher or accelerate) of ``uid``'s run."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            owner = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if owner != uid or not any(run_id.encode() in a for a in argv):
            continue
        if b"training_core.train" in argv and not any(b"accelerate" in a or b"launch" in a for a in argv):
            return int(pid)
    return None


def _paused_once(client_env: Any, host: Any, step: int) -> Path:
    """This host's first attempt waits at the end of ``step`` (training_core.testhooks) until it is
    stopped or killed; the file exists once it waits there. The other host's rank runs on into the next
    step's collective and waits there."""
    inv = client_env.personal_inventory
    head = f"[hosts.{host.name}]\n"
    once = host.home / "paused-group"
    once.unlink(missing_ok=True)
    env = f'env = {{ PIPPA_TEST_PAUSE_AT_STEP = "{step}", PIPPA_TEST_PAUSE_ONCE = "{once}" }}\n'
    inv.write_text(inv.read_text().replace(head, head + env))
    return once


def test_a_killed_rank_stops_the_group_which_resumes_together_and_completes(
    ssh_hosts: list[Any], client_env: Any, tmp_path: Path
) -> None:
    repo = _project(tmp_path / "proj")
    h1, h2 = ssh_hosts[0], ssh_hosts[1]

    def pippa(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PIPPA, *args], cwd=repo, env=client_env.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    held = _paused_once(client_env, h2, 3)
    p = pippa("run", "probe", "--hosts", f"{h1.name},{h2.name}", "--name", "grp", "--retry", "1", "--backoff",
              "1s", "--set", f"train.max_steps={STEPS}", "--set", "checkpoint.every=2")  # fmt: skip
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.split()[1]
    d1, d2 = (h.home / "pippa" / "runs" / run_id for h in (h1, h2))

    def logs() -> str:
        return "\n".join(f"--- {d}\n" + (d / "output.log").read_text()[-3000:]
                         for d in (d1, d2) if (d / "output.log").exists())  # fmt: skip

    wait_for(held.exists, 300, logs)  # rank 1 waits after step 3; checkpoint-2 was saved on both hosts
    assert (d2 / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()  # rank 1's host has its own
    pid = _rank_trainer(h2.uid, run_id)
    assert pid is not None, logs()
    os.kill(pid, signal.SIGKILL)

    for d in (d1, d2):
        wait_for(lambda d=d: (d / "exit_code").exists(), 300, logs)
        assert (d / "exit_code").read_text() == "0\n", logs()
    assert steps(d1) == list(range(1, STEPS + 1)), (records(d1), logs())  # one row per step
    assert [r["status"] for r in records(d1) if r.get("type") == "end"] == ["completed"]
    for d in (d1, d2):  # every rank: attempt 1 ended by rank 1's failure, attempt 2 from step 2, completed
        first, second = attempts(d)
        assert first["first_failed"] == {"rank": 1, "host": h2.name}, first
        assert first["class"] == "crash" and first["decision"]["retry"], first
        assert second["class"] == "completed" and second["resumed_from_step"] == 2, second
    a1, a2 = attempts(d1)[0], attempts(d2)[0]
    assert abs(a1["end"] - a2["end"]) < 60  # the group stopped together (rank 0 within a bounded time)

    why = pippa("why", run_id, "--host", h1.name, "--json")
    assert why.returncode == 0, why.stderr
    told = json.loads(why.stdout)["attempts"][0]
    assert told["reason"].startswith(f"rank 1 (host {h2.name}) failed first"), told
