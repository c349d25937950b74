"""A sync whose connection keeper dies (SIGKILL) in the middle says so in one line and exits with the
unreachable code (it exited 1 with nothing said: the keeper socket's EPIPE read to click as a closed
stdout); the host's files stay as they were, and the next sync goes direct."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PIPPA
from projects import make_project
from test_keeper import kept  # noqa: F401 (the fixture: reuse on, a private runtime dir)

from pippa_ops.transport import reuse

pytestmark = pytest.mark.ssh


def _until(check, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_a_sync_whose_keeper_is_killed_says_so_in_one_line(kept, ssh_hosts, tmp_path: Path) -> None:  # noqa: F811
    host = ssh_hosts[1]
    keeper = reuse.start()
    assert keeper is not None
    repo = make_project(tmp_path / "repo")
    (repo / "a.txt").write_text("first\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.txt"], check=True)
    first = subprocess.run([PIPPA, "sync", host.name], env=kept.env, cwd=repo, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    on_host = host.home / "pippa" / "a.txt"
    assert on_host.read_text() == "first\n"

    # the next sync is held in its packing (a zstd and a gzip on its PATH that wait for a file) while
    # the keeper that relays it is killed
    (repo / "a.txt").write_text("second, longer\n")
    fake, held, go = tmp_path / "bin", tmp_path / "held", tmp_path / "go"
    fake.mkdir()
    for name in ("zstd", "gzip"):
        real = subprocess.run(["which", name], capture_output=True, text=True, check=True).stdout.strip()
        script = f'#!/bin/sh\ntouch {held}\nwhile [ ! -e {go} ]; do sleep 0.05; done\nexec {real} "$@"\n'
        (fake / name).write_text(script)
        (fake / name).chmod(0o755)
    env = {**kept.env, "PATH": f"{fake}:{kept.env['PATH']}"}
    p = subprocess.Popen(
        [PIPPA, "sync", host.name],
        env=env,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until(held.exists)
        os.kill(keeper, signal.SIGKILL)
        go.touch()
        _out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 4, err
    assert err.count("\n") == 1 and err.startswith(f"pippa: {host.name}: lost the connection mid-sync"), err
    assert "connection keeper went away" in err
    assert on_host.read_text() == "first\n"

    again = subprocess.run([PIPPA, "sync", host.name], env=kept.env, cwd=repo, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert on_host.read_text() == "second, longer\n"
