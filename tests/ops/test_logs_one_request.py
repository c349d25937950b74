"""``pippa logs NAME --host H`` is ONE agent request (the host's runs, the run the name means there and
its output: ``read_run``), and so is ``pippa logs NAME`` where the inventory has one host, counted by
the connection keeper, which runs every command of a host on
its one connection; and what it prints, its error lines and exit codes are those of the listing-then-
read it replaces: a session name, a whole or short run id, ``--tail``, a finished and a running run,
no name, ``-f`` on an ended run, an unknown name and a short id that fits several runs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from test_keeper import kept  # noqa: F401 (the fixture: reuse on, a private runtime dir)

from pippa_ops.errors import ExitCode
from pippa_ops.transport import reuse

pytestmark = pytest.mark.ssh


def _pippa(env: ClientEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], env=env.env, capture_output=True, text=True, timeout=90)


def _commands(host: str) -> int:
    """The commands the keeper has run on ``host``: each one starts one agent process there."""
    status = reuse.status()
    assert status is not None, "no keeper answers"
    return sum(int(h["commands"]) for h in status["hosts"] if h["name"] == host)


def _until(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def _start(env: ClientEnv, host: str, session: str, cmd: str) -> str:
    r = _pippa(env, "run", "--host", host, "--name", session, "--cmd", cmd, "--json")
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["run_ids"][0])


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _unique_prefix(run: str, runs: Path) -> str | None:
    """The shortest cut of ``run`` into its hex tail that no other run on the host starts with, once
    the second of its stamp is over (a run started later has a later stamp); None when only the whole
    id is unique (another run of that second shares all but the last digit)."""
    while time.strftime("%Y%m%d-%H%M%S") == run[:15]:
        time.sleep(0.05)
    others = [p.name for p in runs.iterdir() if p.name != run]
    for n in range(len(run) - 4, len(run)):
        if not any(o.startswith(run[:n]) for o in others):
            return run[:n]
    return None


def test_logs_is_one_agent_request_with_the_output_errors_and_exit_codes_of_before(kept, ssh_hosts):  # noqa: F811
    h = ssh_hosts[1]
    assert reuse.start() is not None
    runs = h.home / "pippa" / "runs"
    tag = f"lg{os.getpid()}"  # sessions of its own: the hosts are shared by the session's tests
    done, cut = "", None
    for _ in range(5):  # the hosts are shared: a prefix of this run's id that fits it alone
        if done:  # the session name means one run again
            assert _pippa(kept, "rm", done, "--host", h.name, "--yes").returncode == 0
        done = _start(kept, h.name, f"{tag}d", "for i in 1 2 3 4 5; do echo line$i; done; exit 3")
        ended = runs / done / "exit_code"
        _until(ended.exists)
        cut = _unique_prefix(done, runs)
        if cut is not None:
            break
    assert cut is not None, "five runs in a row shared all but a digit with another run"
    live = _start(kept, h.name, f"{tag}r", "echo a; echo b; sleep 60")
    _until(lambda: _read(runs / live / "output.log") == "a\nb\n")
    whole = "".join(f"line{i}\n" for i in range(1, 6))
    assert _read(runs / done / "output.log") == whole

    def logs(*args: str) -> tuple[int, str, str, int]:
        before = _commands(h.name)
        r = _pippa(kept, "logs", *args)
        return r.returncode, r.stdout, r.stderr, _commands(h.name) - before

    try:
        short = done.split("-", 2)[2]  # label-hex: a dash tail
        for name in (f"{tag}d", done, short, cut):  # session, whole id, tail, a prefix of its own
            assert logs(name, "--host", h.name) == (0, whole, "", 1), name
        assert logs(f"{tag}d", "--host", h.name, "--tail", "2") == (0, "line4\nline5\n", "", 1)
        assert logs(done, "--host", h.name, "-n", "0") == (0, "", "", 1)
        assert logs(f"{tag}d", "--host", h.name, "-f") == (3, whole, "", 1)  # an ended run: its code
        assert logs(f"{tag}r", "--host", h.name) == (0, "a\nb\n", "", 1)  # a running run
        assert logs(live, "--host", h.name, "--tail", "1") == (0, "b\n", "", 1)
        assert logs("--host", h.name) == (0, "a\nb\n", "", 1)  # no name: the newest run

        code, out, err, n = logs(f"{tag}nosuch", "--host", h.name)
        assert (code, out, n) == (int(ExitCode.NOT_FOUND), "", 1)
        assert err == f"pippa: {h.name}: no run or session named '{tag}nosuch' (see `pippa ps`)\n", err
        prefix = done[:8]  # the date: both runs' (and any other run of the day's) prefix
        code, out, err, n = logs(prefix, "--host", h.name)
        assert (code, out, n) == (int(ExitCode.CONFLICT), "", 1)
        assert err.startswith(f"pippa: {h.name}: '{prefix}' fits several runs (") and done in err, err
        assert err.endswith("); give more of the id\n") and live in err and err.count("\n") == 1, err

        # without --host: one request where the inventory has one host; with several (these tests'),
        # a listing of each, then the read on the host that has the run
        per_host = 1 if len(ssh_hosts) == 1 else 2
        assert logs(f"{tag}d") == (0, whole, "", per_host)
        assert logs(short, "--tail", "2") == (0, "line4\nline5\n", "", per_host)
        assert logs(live) == (0, "a\nb\n", "", per_host)
        code, out, err, n = logs(f"{tag}nosuch")
        assert (code, out, n) == (int(ExitCode.NOT_FOUND), "", 1)
        assert err == f"pippa: no host has a run or session named '{tag}nosuch'\n", err
    finally:
        _pippa(kept, "stop", f"{tag}r", "--host", h.name, "--grace", "0.5")


def test_logs_without_host_is_one_request_where_the_inventory_has_one_host(kept, ssh_hosts):  # noqa: F811
    """With one host besides ``local``, ``pippa logs NAME`` asks that host once (``read_run``), with the
    output, error line and exit code of the listing-then-read it replaces."""
    h = ssh_hosts[0]
    conf = kept.home / ".config" / "pippa" / "hosts.toml"
    blocks = [b for b in conf.read_text().split("\n\n") if b.strip()]
    conf.write_text("".join(b + "\n\n" for b in blocks if b.startswith(f"[hosts.{h.name}]")))
    assert reuse.start() is not None
    runs = h.home / "pippa" / "runs"
    tag = f"l1{os.getpid()}"
    done = _start(kept, h.name, f"{tag}d", "echo one; echo two; exit 4")
    _until(lambda: (runs / done / "exit_code").exists())

    def logs(*args: str) -> tuple[int, str, str, int]:
        before = _commands(h.name)
        r = _pippa(kept, "logs", *args)
        return r.returncode, r.stdout, r.stderr, _commands(h.name) - before

    assert logs(f"{tag}d") == (0, "one\ntwo\n", "", 1)
    assert logs(done, "--tail", "1") == (0, "two\n", "", 1)
    code, out, err, n = logs(f"{tag}nosuch")
    assert (code, out, n) == (int(ExitCode.NOT_FOUND), "", 1)
    assert err == f"pippa: no host has a run or session named '{tag}nosuch'\n", err
