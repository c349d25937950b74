"""``kill -9`` of a command served by the warm process (pippa_ops.instant) ends the command: the warm
process's child for that client hangs up with it, and so does what the child started, as a cold command
ends when its terminal goes; never the warm process itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PIPPA
from projects import make_project
from test_instant import warm, warm_server  # noqa: F401 (the fixtures: the keeper and the warm process)
from test_keeper import kept  # noqa: F401 (warm_server's fixture)

from pippa_ops.instant import client

pytestmark = pytest.mark.ssh


def _until(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _children(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent's wait."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] != "Z"


def _warm_pid() -> int:
    return int(client.socket_path().with_suffix(".lock").read_text())


def _served_child(server: int, before: set[int]) -> int:
    """The warm process's child that serves the command just started."""
    found: list[int] = []
    _until(lambda: bool(found.extend(_children(server) - before) or found))
    return found[0]


def test_a_killed_client_of_a_following_command_ends_its_child(warm, ssh_hosts):  # noqa: F811
    h = ssh_hosts[0].name
    ticking = "while true; do echo tick; sleep 1; done"
    started = subprocess.run(
        [PIPPA, "run", "--host", h, "-n", "killfollow", "--cmd", ticking, "--json"],
        env=warm.env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    run_id = json.loads(started.stdout)["run_ids"][0]
    server = _warm_pid()
    before = _children(server)
    p = subprocess.Popen(
        [PIPPA, "logs", run_id, "--host", h, "-f"],
        env=warm.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        child = _served_child(server, before)
        assert p.stdout is not None
        assert b"tick" in p.stdout.readline()  # it follows the run's output
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        _until(lambda: not _alive(child), 15)  # it would follow the log for as long as the run runs
        assert _alive(server)  # the hang-up reached the child's own group, not the warm process
    finally:
        p.kill()
        p.wait()
        subprocess.run(
            [PIPPA, "stop", "killfollow", "--host", h, "--grace", "1"],
            env=warm.env,
            capture_output=True,
            timeout=90,
        )


def test_a_killed_sync_stops_and_changes_nothing_on_the_host(warm, ssh_hosts, tmp_path):  # noqa: F811
    """The sync is held in its packing (a ``zstd`` and a ``gzip`` on the client's PATH that never
    answer): SIGKILL of the client ends the child and its packers, and the host's tree stays as it was."""
    host = ssh_hosts[1]
    repo = make_project(tmp_path / "repo")
    (repo / "held.txt").write_text("never sent\n")
    subprocess.run(["git", "-C", str(repo), "add", "held.txt"], check=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("zstd", "gzip"):
        (fake / name).write_text("#!/bin/sh\nexec sleep 300\n")
        (fake / name).chmod(0o755)
    env = {**warm.env, "PATH": f"{fake}:{warm.env['PATH']}"}
    server = _warm_pid()
    before = _children(server)
    p = subprocess.Popen(
        [PIPPA, "sync", host.name], env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        child = _served_child(server, before)
        packer: list[int] = []
        _until(lambda: bool(packer.extend(_children(child)) or packer), 60)  # tar and the held compressor
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        _until(lambda: not _alive(child) and not any(_alive(q) for q in packer), 15)
        assert _alive(server)
        assert not (host.home / "pippa" / "held.txt").exists()
    finally:
        p.kill()
        p.wait()
