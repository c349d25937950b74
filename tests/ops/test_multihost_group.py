"""A run over two loopback SSH hosts (``pippa run RECIPE --hosts a,b --retry 1``) fails and restarts as
one group (pippa_agent.supervise.group):

- rank 1's trainer is killed: rank 0 stops too, both resume from the checkpoint each host kept (no
  shared file system: every host saves a whole one) and complete, one metrics row per step; ``why``
  names the rank and host that failed first;
- rank 1's trainer is stopped (SIGSTOP): rank 0 waits in a collective, its stall watch ends its attempt
  and tells the group; rank 1's supervisor finds its job stopped (so ``why`` names rank 1) and ends it
  (SIGINT, SIGCONT), so both save the same step and resume from it together."""

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
    """This host's first attempt waits at the end of ``step`` (training_core.run.testhooks) until it is
    stopped or killed; the file exists once it waits there. The other host's rank runs on into the next
    step's collective and waits there."""
    inv = client_env.personal_inventory
    head = f"[hosts.{host.name}]\n"
    once = host.home / "paused-group"
    once.unlink(missing_ok=True)
    env = f'env = {{ PIPPA_TEST_PAUSE_AT_STEP = "{step}", PIPPA_TEST_PAUSE_ONCE = "{once}" }}\n'
    inv.write_text(inv.read_text().replace(head, head + env))
    return once


class Group:
    """A probe run over the first two test hosts, rank 1 (the second host) waiting after step 3 once."""

    def __init__(self, ssh_hosts: list[Any], client_env: Any, tmp_path: Path, *flags: str) -> None:
        self.repo, self.env = _project(tmp_path / "proj"), client_env.env
        self.h1, self.h2 = ssh_hosts[0], ssh_hosts[1]
        held = _paused_once(client_env, self.h2, 3)
        hosts = f"{self.h1.name},{self.h2.name}"
        sets = ["--set", f"train.max_steps={STEPS}", "--set", "checkpoint.every=2"]
        p = self.pippa(
            "run",
            "probe",
            "--hosts",
            hosts,
            "--name",
            "grp",
            "--retry",
            "1",
            "--backoff",
            "1s",
            *sets,
            *flags,
        )
        assert p.returncode == 0, p.stderr
        self.run_id = p.stdout.split()[1]
        self.d1, self.d2 = (h.home / "pippa" / "runs" / self.run_id for h in (self.h1, self.h2))
        wait_for(held.exists, 300, self.logs)  # rank 1 waits after step 3; checkpoint-2 saved on both hosts
        assert (self.d2 / "checkpoints" / "checkpoint-2" / "model.safetensors").is_file()  # a whole one there
        pid = _rank_trainer(self.h2.uid, self.run_id)
        assert pid is not None, self.logs()
        self.rank1 = pid

    def pippa(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PIPPA, *args], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {d}\n" + (d / "output.log").read_text()[-3000:]
            for d in (self.d1, self.d2)
            if (d / "output.log").exists()
        )

    def completed(self) -> None:
        """Both ranks end 0 after two attempts; rank 0's metrics have one row per step."""
        for d in (self.d1, self.d2):
            wait_for(lambda d=d: (d / "exit_code").exists(), 300, self.logs)
            assert (d / "exit_code").read_text() == "0\n", self.logs()
        assert steps(self.d1) == list(range(1, STEPS + 1)), (records(self.d1), self.logs())
        assert [r["status"] for r in records(self.d1) if r.get("type") == "end"] == ["completed"]


def test_a_killed_rank_stops_the_group_which_resumes_together_and_completes(
    ssh_hosts: list[Any], client_env: Any, tmp_path: Path
) -> None:
    g = Group(ssh_hosts, client_env, tmp_path)
    h2, d1, d2, run_id = g.h2, g.d1, g.d2, g.run_id
    os.kill(g.rank1, signal.SIGKILL)
    g.completed()
    for d in (d1, d2):  # every rank: attempt 1 ended by rank 1's failure, attempt 2 from step 2, completed
        first, second = attempts(d)
        assert first["first_failed"] == {"rank": 1, "host": h2.name}, first
        assert first["class"] == "crash" and first["decision"]["retry"], first
        assert second["class"] == "completed" and second["resumed_from_step"] == 2, second
    a1, a2 = attempts(d1)[0], attempts(d2)[0]
    assert abs(a1["end"] - a2["end"]) < 60  # the group stopped together (rank 0 within a bounded time)

    why = g.pippa("why", run_id, "--host", g.h1.name, "--json")
    assert why.returncode == 0, why.stderr
    told = json.loads(why.stdout)["attempts"][0]
    assert told["reason"].startswith(f"rank 1 (host {h2.name}) failed first"), told


def test_a_stopped_rank_stalls_the_group_which_saves_and_resumes_together(
    ssh_hosts: list[Any], client_env: Any, tmp_path: Path
) -> None:
    g = Group(ssh_hosts, client_env, tmp_path, "--stall-timeout", "10s")
    os.kill(g.rank1, signal.SIGSTOP)  # rank 0 goes on into step 4 and waits there for rank 1
    g.completed()
    for d in (g.d1, g.d2):  # every rank: attempt 1 stalled, saved step 4; attempt 2 from it
        first, second = attempts(d)
        assert first["first_failed"] == {"rank": 1, "host": g.h2.name}, first  # its job was the stopped one
        assert "its job is stopped" in first["reason"], first
        assert first["class"] == "stalled" and first["decision"]["spends"] == "infra", first
        assert second["class"] == "completed" and second["resumed_from_step"] == 4, second


def test_failover_with_hosts_is_refused_in_one_line(client_env: Any, tmp_path: Path) -> None:
    argv = [PIPPA, "run", "probe", "--hosts", "a,b", "--failover", "local"]
    p = subprocess.run(
        argv, cwd=_project(tmp_path / "p"), env=client_env.env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip().splitlines()[0]]
    assert "--failover" in p.stderr and "--hosts" in p.stderr, p.stderr
