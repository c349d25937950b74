"""The dead-man's switch from the host, end to end: ``pippa up`` pushes PIPPA_HEARTBEAT (a secret) and the
host's watcher pings a real HTTP server on loopback (tests/ops/webhook.py, standing in for healthchecks.io)
the way healthchecks.io reads pings: ``/start``, a ping a period while the run makes progress, none while
it is frozen (SIGSTOP) though the host is up, ``/fail`` once when it fails, and silence when the host dies
(its sshd and every process of its user killed)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import test_alerts
from sshd import _kill_user_processes
from test_alerts import configure, pippa, started

pytestmark = pytest.mark.ssh
repo, hook, restore_host = test_alerts.repo, test_alerts.hook, test_alerts.restore_host  # their fixtures
TOKEN = "hb-7c1e0d5a"  # the secret part of the heartbeat URL
EVERY = 1.0  # heartbeat_every in the host entry: pings a second apart


def _pids(h: object, *words: str) -> list[int]:
    """The host user's processes whose command line holds every one of ``words``."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            mine = entry.name.isdigit() and entry.stat().st_uid == h.uid  # type: ignore[attr-defined]
            if mine and all(w.encode() in (entry / "cmdline").read_bytes() for w in words):
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def _pings(posts_of: object, since: float = 0.0) -> list[str]:
    """The suffix of each ping after ``since`` ("" for a plain ping, "/start", "/fail")."""
    base = f"/hook/{TOKEN}"
    posts = list(posts_of.posts)  # type: ignore[attr-defined]
    return [p.path.removeprefix(base) for p in posts if p.received > since]


def _wait(pred: object, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


def test_a_host_pings_while_its_run_progresses_stops_when_frozen_fails_once_and_goes_silent_when_killed(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    url = f"http://{hook.address}:{hook.port}/hook/{TOKEN}"
    (repo / ".env").write_text(f"PIPPA_HEARTBEAT={url}\n")
    configure(client_env, h.name, f'secrets = []\nheartbeat_every = "{EVERY:g}s"\n')
    up = pippa(env, repo, "up", h.name)
    assert up.returncode == 0, up.stderr
    assert TOKEN not in up.stdout + up.stderr  # the secret is never printed

    loop = "while :; do echo beat-hb1; sleep 0.2; done"
    run = pippa(
        env,
        repo,
        "run",
        "--host",
        h.name,
        "--name",
        "hb1",
        "--cmd",
        loop,
        "--stall-timeout",
        "3s",
        "--infra-retries",
        "0",
    )
    assert run.returncode == 0, run.stderr
    run_id = started(run.stdout)
    _wait(lambda: _pings(hook).count("/start") == 1 and _pings(hook).count("") >= 3, 60, f"{_pings(hook)}")
    run_dir = h.home / "pippa" / "runs" / run_id
    assert TOKEN not in (run_dir / "output.log").read_text()

    # Frozen (the job and its supervisor stopped): no new output, so the pings stop; the host stays up.
    supervisor = _pids(h, "supervise", run_id)
    frozen = _pids(h, "beat-hb1") + supervisor
    assert len(frozen) >= 2, frozen
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.time()
    time.sleep(3 + 2 * EVERY + 4)  # past the stall window (3 s) and two periods, then 4 s of silence
    watcher = json.loads((h.home / ".config" / "pippa" / "alerts" / "watch.json").read_text())["pid"]
    os.kill(watcher, 0)  # the watcher is alive: the host is up, its run is not progressing
    assert "" not in _pings(hook, since=t0 + 3 + 2 * EVERY + 1), _pings(hook, since=t0)

    # Its supervisor goes on, finds the job stalled, ends it, gives up (no infra retry): /fail, once.
    for pid in supervisor:
        os.kill(pid, signal.SIGCONT)
    _wait(lambda: (run_dir / "exit_code").exists(), 60, "the stalled run did not end")
    _wait(lambda: "/fail" in _pings(hook, since=t0), 30, f"no /fail: {_pings(hook, since=t0)}")
    time.sleep(3 * EVERY)
    assert _pings(hook, since=t0).count("/fail") == 1
    fail = next(p for p in hook.posts if p.path.endswith("/fail"))
    assert run_id in fail.body.decode() and len(fail.body.decode().splitlines()) == 1

    # A second run, then the host dies: its sshd and every process of its user killed.
    loop2 = loop.replace("hb1", "hb2")
    n = len(_pings(hook))  # before the run: its /start may come while `pippa run` waits for its first line
    run_id2 = started(pippa(env, repo, "run", "--host", h.name, "--name", "hb2", "--cmd", loop2).stdout)
    _wait(
        lambda: _pings(hook)[n:].count("/start") == 1 and _pings(hook)[n:].count("") >= 2,
        60,
        "no /start and two pings for the second run",
    )
    h.drop()
    try:
        _kill_user_processes(h.uid)
        t1 = time.time()
        time.sleep(2 * EVERY + 1)
        assert _pings(hook, since=t1 + 0.5) == [], "a dead host kept pinging"
    finally:
        h.start()
    assert run_id2
