"""``kill -9`` of ``pippa resume RUN --on HOST`` once the copy has landed (the old host's ``moved_to``
written) leaves no run stranded between hosts: the move finishes whole, resumed on the new host to its
end, with the real trainer between two loopback OpenSSH hosts in real tmux."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import PIPPA
from test_move_ssh import _paused_at_step_4, _ps, _stop_after_a_checkpoint
from test_restart_ssh import REPO, SETS, STEPS, pippa, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def test_a_move_killed_after_its_copy_landed_still_resumes_on_the_new_host(client_env, ssh_hosts) -> None:
    env, a, b = client_env.env, ssh_hosts[2], ssh_hosts[3]
    _paused_at_step_4(client_env, a)
    run_id = started(pippa(env, "run", "tiny", "--host", a.name, "--name", "mkill", *SETS))
    old_dir, new_dir = a.home / "pippa" / "runs" / run_id, b.home / "pippa" / "runs" / run_id
    _stop_after_a_checkpoint(env, a.name, "mkill", old_dir)

    p = subprocess.Popen(
        [PIPPA, "resume", run_id, "--on", b.name],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (old_dir / "moved_to").exists():  # the point held: copied, the resume still to come
            assert p.poll() is None and time.monotonic() < deadline, "the move ended before its copy landed"
            time.sleep(0.005)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL
    finally:
        p.kill()
        p.wait()

    # no run between hosts: the one on the new host is resumed and trains to its end, one row per step
    wait_for(
        lambda: steps(new_dir) == list(range(1, STEPS + 1)),
        300,
        lambda: (new_dir / "output.log").read_text()[-3000:],
    )
    code = new_dir / "exit_code"
    wait_for(
        lambda: code.exists() and code.read_text() == "0\n",
        120,
        lambda: code.read_text() if code.exists() else "no exit_code",
    )
    assert _ps(env, a.name, run_id)["state_text"] == f"moved to {b.name}"
