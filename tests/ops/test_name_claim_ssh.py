"""One name, one run (issue 44): 20 starts of ``run --name same`` at once, from two client homes, on one
loopback OpenSSH host: exactly one run starts, the 19 others are refused in one line each, and no
refused start leaves a run directory behind (the host agent claims the session name and makes the run
directory under one lock)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import PIPPA, ClientEnv

pytestmark = pytest.mark.ssh


def test_twenty_starts_of_one_name_make_one_run_and_nineteen_refusals(client_env, ssh_hosts, tmp_path):
    h = ssh_hosts[1]
    other = ClientEnv(tmp_path / "second-home")
    shutil.copytree(client_env.home, other.home)
    runs = h.home / "pippa" / "runs"
    before = set(os.listdir(runs)) if runs.exists() else set()  # (made by the host user, never here)
    name = f"same{os.getpid()}"
    synced = subprocess.run([PIPPA, "sync", h.name], env=client_env.env, capture_output=True, text=True)
    assert synced.returncode == 0, synced.stderr  # the 20 starts' syncs then change nothing
    argv = [PIPPA, "run", "--host", h.name, "--name", name, "--cmd", "sleep 30"]
    pipe = subprocess.PIPE
    procs = [
        subprocess.Popen(argv, env=(client_env if i % 2 else other).env, stdout=pipe, stderr=pipe, text=True)
        for i in range(20)
    ]
    try:
        done = [(p.wait(timeout=240), *p.communicate()) for p in procs]
        won = [d for d in done if d[0] == 0]
        lost = [d for d in done if d[0] != 0]
        assert len(won) == 1 and len(lost) == 19, [d[2][-300:] for d in done]
        for _code, out, err in lost:
            assert out == "" and err.count("\n") == 1 and name in err and "Traceback" not in err, err
        new = sorted(n for n in set(os.listdir(runs)) - before if not n.startswith("."))  # not the lock
        assert len(new) == 1 and won[0][1].startswith(f"started {new[0]}"), (new, won)
    finally:
        subprocess.run(
            [PIPPA, "stop", name, "--host", h.name, "--grace", "0.5"],
            env=client_env.env,
            capture_output=True,
            timeout=120,
        )
