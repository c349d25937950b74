"""Instant commands: a hot verb runs in a child of the warm process (pippa_ops.instant) with the same
output, error lines and exit codes as a cold command, while the command itself imports no typer,
click, rich, asyncssh, textual or torch; and the warm process is guarded as the keeper is."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from test_keeper import kept  # noqa: F401 (the fixture: reuse on, a private runtime dir)

from pippa_ops.instant import client, server
from pippa_ops.transport import reuse

pytestmark = pytest.mark.ssh
HEAVY = ("typer", "click", "rich", "asyncssh", "textual", "torch")
_PROBE = """
import json, os, sys
sys.argv = ["pippa", *{args!r}]
from pippa_ops.cli.app import main
def loaded(code):
    print("LOADED", json.dumps(sorted(sys.modules)), code, flush=True)
exit_now = os._exit
def _exit(code):  # a warm command's client ends with os._exit
    loaded(code)
    exit_now(code)
os._exit = _exit
try:
    main()
except SystemExit as e:
    loaded(e.code)
"""


def _until(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.fixture
def warm(warm_server: tuple[ClientEnv, subprocess.Popen[bytes]]) -> ClientEnv:
    """The keeper and the warm process, both running for this client."""
    return warm_server[0]


@pytest.fixture
def warm_server(kept: ClientEnv) -> Iterator[tuple[ClientEnv, subprocess.Popen[bytes]]]:  # noqa: F811
    """``warm``, and the warm process itself."""
    assert reuse.start() is not None
    path = client.socket_path()
    proc = subprocess.Popen(
        [sys.executable, "-c", client.SERVER_MAIN, str(path)],
        env=kept.env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _until(lambda: path.exists())
        yield kept, proc
    finally:
        proc.terminate()
        proc.wait(10)
        for lock in path.parent.glob("i-*.lock"):  # those the test's commands started (another locale)
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(lock.read_text()), signal.SIGTERM)


def _pippa(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], env=env, capture_output=True, text=True, timeout=90)


def _loaded(env: dict[str, str], *args: str) -> tuple[set[str], str]:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE.format(args=list(args))],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("LOADED"))
    mods, code = line.removeprefix("LOADED ").rsplit(" ", 1)
    return set(json.loads(mods)), code


def test_hot_verbs_import_no_heavy_module_when_warm(warm, ssh_hosts):
    """The import budget: the command process loads none of HEAVY; the warm process's child did the work."""
    h = ssh_hosts[0].name
    started = _pippa(warm.env, "run", "--host", h, "-n", "budget", "--cmd", "echo hi; sleep 30", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_ids"][0]
    verbs = [
        ["ps", "--host", h],
        ["logs", run_id, "--host", h],
        ["gpus", h, "--json"],
        ["run", "--host", h, "-n", "budget2", "--cmd", "true"],
        ["stop", "budget", "--host", h, "--grace", "1"],
        ["wait", run_id, "--host", h],
        ["sync", h, "--dry-run"],
        ["doctor", h, "--quick", "--json"],
        ["ps", "--help"],
        ["--version"],
    ]
    for args in verbs:
        mods, _code = _loaded(warm.env, *args)
        assert not {m.split(".")[0] for m in mods} & set(HEAVY), (args, sorted(mods))
        assert {m for m in mods if m.startswith("pippa_ops.cli.")} == {"pippa_ops.cli.app"}, args


@pytest.mark.parametrize(
    "args",
    [
        ["ps", "--host", "{h}"],
        ["ps", "--host", "{h}", "--json"],
        ["ps", "--host", "nosuch"],
        ["logs", "nosuchrun", "--host", "{h}"],
        ["stop", "nosuchrun", "--host", "{h}"],
        ["gpus", "{h}"],
        ["sync", "nosuch"],
        ["doctor", "nosuch", "--quick"],
        ["ps", "--help"],
        ["ps", "--last", "x"],
        ["ps", "--no-such-flag"],
    ],
)
def test_warm_output_and_exit_code_are_the_cold_ones(warm, ssh_hosts, args):
    args = [a.format(h=ssh_hosts[0].name) for a in args]
    hot = _pippa(warm.env, *args)
    cold = _pippa({**warm.env, "PIPPA_NO_REUSE": "1"}, *args)
    assert (hot.returncode, hot.stdout, hot.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert _loaded(warm.env, *args)[1] == str(cold.returncode)


def test_a_client_with_another_locale_is_refused_and_runs_the_command_itself(warm, ssh_hosts):
    env = {**warm.env, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "latin-1"}
    mods, code = _loaded(env, "ps", "--host", ssh_hosts[0].name)
    assert "pippa_ops.cli.typer_app" in mods and code == "0"


def test_ctrl_c_reaches_the_child_and_ends_the_command_as_a_cold_one(warm, ssh_hosts):
    h = ssh_hosts[0].name
    started = _pippa(warm.env, "run", "--host", h, "-n", "longer", "--cmd", "sleep 60", "--json")
    run_id = json.loads(started.stdout)["run_ids"][0]
    p = subprocess.Popen(
        [PIPPA, "logs", run_id, "--host", h, "-f"],
        env=warm.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = int(client.socket_path().with_suffix(".lock").read_text())
    _until(lambda: Path(f"/proc/{server}/task/{server}/children").read_text().strip() != "")
    time.sleep(1)  # the child is following (no line to wait for: the run prints nothing)
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 130 or "stopped logs" in err, (p.returncode, err)
    assert "Traceback" not in err
    _pippa(warm.env, "stop", "longer", "--host", h, "--grace", "1")


def test_the_warm_socket_is_private_and_checks_its_peer(warm):
    path = client.socket_path()
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
    os.chmod(path.parent, 0o755)  # loosened (a umask, a copy): tightened back before use, as the keeper's
    with client._connect(path) as sock:
        assert sock is not None
    assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
    os.chown(path, 65534, -1)  # a socket someone else owns is not used
    try:
        assert client._connect(path) is None
    finally:
        os.chown(path, os.getuid(), -1)


def test_a_changed_module_is_refused(tmp_path, monkeypatch):
    """A warm process must not run code older than the disk: a module it imported changed, it refuses
    (and exits); the client then runs the command itself. A module of its own, so no other test's warm
    process sees a change."""
    module = tmp_path / "probe.py"
    module.write_text("")
    monkeypatch.setitem(sys.modules, "pippa_ops._stamp_probe", type(sys)("pippa_ops._stamp_probe"))
    sys.modules["pippa_ops._stamp_probe"].__file__ = str(module)
    stamps = server.code_stamps()
    request = {
        "argv": ["ps"],
        "env": dict(os.environ),
        "prefix": sys.prefix,
        "package": str(client.PACKAGE),
        "path": ["", *sys.path[1:]],
    }
    server.check(request, stamps)
    st = os.stat(module)
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(server.Refused, match="code changed"):
        server.check(request, stamps)


def test_a_time_zone_of_its_own_gets_a_warm_process_of_its_own(warm, ssh_hosts):
    """ps prints local start times: a client in another zone must not see the warm process's."""
    h = ssh_hosts[0].name
    assert _pippa(warm.env, "run", "--host", h, "-n", "tz", "--cmd", "true").returncode == 0
    env = {**warm.env, "TZ": "Asia/Kolkata"}
    assert client.socket_path() != _socket_path_in(env)
    hot = _pippa(env, "ps", "--host", h, "--all")
    _until(lambda: _socket_path_in(env).exists())  # started after that command, for the next
    again = _pippa(env, "ps", "--host", h, "--all")
    cold = _pippa({**env, "PIPPA_NO_REUSE": "1"}, "ps", "--host", h, "--all")
    assert hot.stdout == again.stdout == cold.stdout and again.returncode == 0
    pid = int(_socket_path_in(env).with_suffix(".lock").read_text())
    os.kill(pid, signal.SIGTERM)


def _socket_path_in(env: dict[str, str]) -> Path:
    code = "from pippa_ops.instant import client; print(client.socket_path())"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return Path(p.stdout.strip())


def test_a_command_whose_child_is_terminated_ends_by_the_same_signal(warm, ssh_hosts):
    """TERM (or HUP) forwarded to the child kills it; the command then dies of it too, as a cold one."""
    h = ssh_hosts[0].name
    started = _pippa(warm.env, "run", "--host", h, "-n", "termed", "--cmd", "sleep 60", "--json")
    run_id = json.loads(started.stdout)["run_ids"][0]
    p = subprocess.Popen(
        [PIPPA, "logs", run_id, "--host", h, "-f"],
        env=warm.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = int(client.socket_path().with_suffix(".lock").read_text())
    _until(lambda: Path(f"/proc/{server}/task/{server}/children").read_text().strip() != "")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGTERM
    _pippa(warm.env, "stop", "termed", "--host", h, "--grace", "1")


def test_what_the_warm_process_imports_ahead_exists():
    """PRELOAD names modules by string: one renamed or moved would silently leave a child to import it."""
    import importlib.util

    assert [m for m in server.PRELOAD if importlib.util.find_spec(m) is None] == []


def test_the_host_agent_files_are_watched_and_a_reinstall_ends_the_warm_process():
    """The warm process builds the host agent's bundle once, so a change to an agent file must count as
    changed code; a request from the same environment with another import path (a reinstall since it
    started) is refused as stale: the process exits instead of refusing every command after it."""
    from pippa_ops.transport import agent_bundle

    stamps = server.code_stamps()
    assert {str(p) for p in agent_bundle.files()} <= set(stamps)
    assert any(p.endswith("pippa_agent/bootstrap.py") for p in stamps)
    request = {
        "argv": ["ps"],
        "env": dict(os.environ),
        "prefix": sys.prefix,
        "package": client.PACKAGE,
        "path": ["", "/somewhere/else", *sys.path[1:]],
    }
    with pytest.raises(server.Refused, match="another import path") as refused:
        server.check(request, stamps)
    assert refused.value.stale
    with pytest.raises(server.Refused, match="not a hot verb") as refused:
        server.check({**request, "path": ["", *sys.path[1:]], "argv": ["attach", "x"]}, stamps)
    assert not refused.value.stale


def _server_pid(path: str) -> int | None:
    """The newest warm process for ``path`` (its argv names it), not a wrapper waiting to start it."""
    for pid in sorted(filter(str.isdigit, os.listdir("/proc")), key=int, reverse=True):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[-2:] == [path.encode(), b""] and client.SERVER_MAIN.encode() in argv:
            return int(pid)
    return None


def _mine(out: str, run_id: str) -> list[str]:
    """The header and this run's rows, its duration masked (the shared host's other runs come and go)."""
    rows = out.splitlines()
    return [re.sub(r"\b\d+[hm]\d+[ms]\b", "D", r) for r in rows[:1] + [r for r in rows if run_id in r]]


def test_a_stopped_warm_process_holds_no_reader(warm, ssh_hosts):
    """A warm process stopped (SIGSTOP: a suspended laptop, a debugger) before it acknowledges gets none
    of the client's descriptors: ``pippa ps | cat``, ``$(pippa ps)`` and ``pippa logs R | head`` end
    within 3 s, with a cold command's output."""
    h = ssh_hosts[0].name
    cmd = "seq 1 50; sleep 60"
    started = _pippa(warm.env, "run", "--host", h, "-n", "stopped-warm", "--cmd", cmd, "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_ids"][0]
    _until(lambda: _pippa(warm.env, "logs", run_id, "--host", h).stdout.endswith("50\n"))
    lines = [
        f"{PIPPA} ps --host {h} | cat",
        f'x=$({PIPPA} ps --host {h}); printf "%s\\n" "$x"',
        f"{PIPPA} logs {run_id} --host {h} | head -n 3",
    ]
    # the warm process these commands use: the socket their environment names
    probe = [sys.executable, "-c", "from pippa_ops.instant import client; print(client.socket_file())"]
    path = subprocess.run(probe, env=warm.env, capture_output=True, text=True, check=True).stdout.strip()
    pid = _server_pid(path)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        for line in lines:
            t = time.monotonic()
            got = subprocess.run(["sh", "-c", line], env=warm.env, capture_output=True, text=True, timeout=30)
            took = time.monotonic() - t
            cold = subprocess.run(
                ["sh", "-c", line],
                env={**warm.env, "PIPPA_NO_REUSE": "1"},
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert took <= 3.0, (line, took)
            if "logs" in line:
                assert (got.returncode, got.stdout) == (0, cold.stdout) == (0, "1\n2\n3\n"), got.stderr
                continue
            assert got.returncode == 0 and _mine(got.stdout, run_id) == _mine(cold.stdout, run_id), (
                line,
                got.stdout,
                cold.stdout,
                got.stderr,
            )
            assert len(_mine(got.stdout, run_id)) == 2
    finally:
        os.kill(pid, signal.SIGCONT)
        _pippa(warm.env, "stop", "stopped-warm", "--host", h, "--grace", "0.5")
