"""The connection keeper against real loopback sshd: every verb on one kept connection, a relayed
process that behaves like an SSH one, the fallbacks (absent, stale, killed, wedged, foreign keeper)
and the security edge of another Unix user (the host-key policy: tests/ops/test_host_keys.py)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from projects import make_project

from pippa_ops.errors import ExitCode
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.endpoint import endpoint
from pippa_ops.transport import reuse
from pippa_ops.transport.keeper import client as keeper_client
from pippa_ops.transport.keeper.client import KeeperTransport
from pippa_ops.transport.ssh import SSHTransport

sys.path.insert(0, str(Path(__file__).parents[1] / "dash"))
import fake_smi
import monitor_loop

pytestmark = pytest.mark.ssh
BOUND_S = keeper_client.ACK_WAIT_S + 8  # fallback wait plus a direct connection on a busy machine


@pytest.fixture
def kept(ssh_env: ClientEnv, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientEnv]:
    """Reuse on, in this process and in the pippa commands it runs, with a private runtime dir."""
    run_dir = Path(tempfile.mkdtemp(prefix="pk"))  # short: a Unix socket path has ~100 bytes
    monkeypatch.setenv("PIPPA_RUNTIME_DIR", str(run_dir))
    monkeypatch.delenv("PIPPA_NO_REUSE")
    reuse.configure(True, spawn=False)
    reuse.forget()
    try:
        yield ssh_env
    finally:
        reuse.disconnect()
        reuse.configure(False)
        reuse.forget()
        shutil.rmtree(run_dir, ignore_errors=True)


def _pippa(env: ClientEnv, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], env=env.env, cwd=cwd, capture_output=True, text=True, timeout=90)


def _host(name: str) -> dict[str, object]:
    status = reuse.status()
    assert status is not None, "no keeper answers"
    found = [h for h in status["hosts"] if h["name"] == name]
    return found[0] if found else {"connections": 0, "commands": 0}


def _until(check, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_every_verb_runs_on_one_kept_connection(kept, ssh_hosts, tmp_path):
    h = ssh_hosts[0]
    h.install_bin("nvidia-smi", fake_smi.script(gpus=1, python=h.python))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("print(1)\n")
    make_project(repo)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=repo, check=True
    )

    # --no-reuse: a direct connection, and no keeper is left behind
    r = _pippa(kept, "--no-reuse", "ps", "--host", h.name)
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)
    assert reuse.status() is None
    # The first command goes direct and starts the keeper, which connects to the host at once.
    r = _pippa(kept, "ps", "--host", h.name)
    assert r.returncode == 0, r.stderr
    _until(lambda: reuse.status() is not None and _host(h.name)["connections"] == 1)

    def via_keeper(*args: str, code: int = 0) -> str:
        before = int(_host(h.name)["commands"])  # type: ignore[call-overload]
        r = _pippa(kept, *args, cwd=repo)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert int(_host(h.name)["commands"]) > before, f"{args} did not go through the keeper"  # type: ignore[call-overload]
        return r.stdout

    # (other tests of the session may have left runs on this host: what matters is that ps answers)
    assert "runs" in json.loads(via_keeper("ps", "--host", h.name, "--json"))[h.name]
    assert "sent 1 of 1" in via_keeper("sync", h.name)
    out = via_keeper(
        "run", "--host", h.name, "--name", "kt", "--cmd", "echo hello; sleep 0.5; echo bye", "-f"
    )
    assert "hello" in out and "bye" in out
    assert "hello" in via_keeper("logs", "kt", "--host", h.name)
    assert "H100" in via_keeper("gpus", h.name)
    via_keeper("run", "--host", h.name, "--name", "ks", "--cmd", "sleep 30")
    assert "session ks" in via_keeper("stop", "ks", "--host", h.name, "--grace", "0.5")
    via_keeper("attach", "nosuch", "--host", h.name, code=int(ExitCode.NOT_FOUND))
    assert "up" in via_keeper("hosts")
    assert _host(h.name)["connections"] == 1  # one handshake for all of them
    assert int(_host(h.name)["ahead_used"]) > 0  # type: ignore[call-overload]
    assert (
        "python3 -S -I -c"
        in h.run_as_user(["pgrep", "-a", "-u", h.user, "-f", "--", "python3 -S -I -c"]).stdout
    )

    pid = int(reuse.status()["pid"])  # type: ignore[index]
    r = _pippa(kept, "hosts", "--disconnect")
    assert r.returncode == 0 and "closed" in r.stdout, r.stderr
    _until(lambda: not _alive(pid), 5)
    assert reuse.status() is None
    assert "no connection keeper" in _pippa(kept, "hosts", "--disconnect").stdout

    # The agent started ahead went with its connection: nothing of pippa's is left on the host.
    def agents_left() -> str:
        r = h.run_as_user(["pgrep", "-a", "-u", h.user, "-f", "--", "python3 -S -I -c"])
        assert r.returncode in (0, 1), r.stderr
        return r.stdout

    _until(lambda: not agents_left(), 5)


@pytest.mark.parametrize("way", ["keeper", "direct"])
def test_a_relayed_process_behaves_like_an_ssh_one(kept, ssh_hosts, way):
    """The same script, through the keeper and on a direct SSHTransport: the same observations."""
    assert reuse.start() is not None
    h = ssh_hosts[0]
    spec, t = connect(h.name)
    assert isinstance(t, KeeperTransport)
    if way == "direct":
        t = SSHTransport(endpoint(spec))
    with t:
        big = b"x" * 3_000_000
        r = t.run("wc -c; echo oops >&2; exit 3", input=big)
        assert (r.stdout.strip(), r.stderr.strip(), r.exit_status) == (str(len(big)), "oops", 3)
        assert t.run("cat", input=big).stdout.encode() == big  # both ways at once: no deadlock
        with pytest.raises(TimeoutError):
            t.run("sleep 5", timeout=0.5)
        assert t.home() == str(h.home)

        p = t.start("cat")
        p.write(b"hello\n")
        assert p.readline() == b"hello\n"
        p.set_deadline(time.monotonic() + 0.3)
        with pytest.raises(TimeoutError):
            p.readline()  # a stalled read ends at the deadline, the stream stays usable
        p.set_deadline(None)
        p.write(b"again\n")
        assert p.readline() == b"again\n"
        p.close_stdin()
        assert p.read() == b""
        assert p.wait(5) == 0

        p = t.start("echo out; echo err >&2; exec >&- 2>&-; sleep 0.7; exit 4")
        assert p.read() == b"out\n"
        assert p.read() == b""  # the output ended before the command did
        with pytest.raises(TimeoutError):
            p.wait(0.05)
        assert p.wait(10) == 4
        assert p.stderr_text() == "err\n"
        p.kill()

        p = t.start("sleep 31")
        p.kill()
        left = t.run(
            'for i in $(seq 40); do pgrep -u "$USER" -f "slee[p] 31" || exit 0; sleep 0.05; done; exit 1'
        )
        assert left.exit_status == 0, f"sleep still running: {left.stdout}"

        # Closing the transport ends a read blocked in another thread, as closing a connection does.
        p = t.start("sleep 32")
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(p.read()))
        reader.start()
        time.sleep(0.2)
        t.close()
        reader.join(5)
        assert got == [b""] and not reader.is_alive()
        assert p.wait(5) == -1
    if way == "keeper":
        assert isinstance(t, KeeperTransport) and t.relayed
        assert _host(h.name)["connections"] == 1


@pytest.mark.parametrize("way", ["keeper", "direct", "local"])
def test_a_stream_read_on_an_event_loop_loses_no_byte_and_stalls_by_its_deadline(kept, ssh_hosts, way):
    """What the dashboard's GPU feed does: lines read on the loop (``transport.aread``), no thread
    blocked per stream; lines arriving in bursts and split across reads come whole, and in order."""
    from pippa_ops.transport import aread
    from pippa_ops.transport.base import LocalTransport

    assert reuse.start() is not None
    h = ssh_hosts[0]
    spec, t = connect(h.name)
    t = {"keeper": t, "direct": SSHTransport(endpoint(spec)), "local": LocalTransport()}[way]
    lines_of_growing_length = 'for i in $(seq 300); do printf "line %s %s\\n" $i $(printf "%0${i}d" 0); done'
    script = f"{lines_of_growing_length}; sleep 0.3; printf last"

    async def read_all() -> tuple[list[bytes], bool]:
        p = t.start(script)
        assert p.fileno() is not None
        lines = aread.Lines(p, stall_s=10)
        got = [line async for line in _lines(lines)]
        q = t.start("sleep 5")
        try:
            await aread.Lines(q, stall_s=0.3).readline()
            stalled = False
        except TimeoutError:
            stalled = True
        q.kill()
        return got, stalled

    with t:
        got, stalled = asyncio.run(read_all())
    want = [f"line {i} {'0' * i}\n".encode() for i in range(1, 301)] + [b"last"]
    assert got == want
    assert stalled, "a silent stream raises TimeoutError after its stall time"
    if way == "keeper":
        assert isinstance(t, KeeperTransport) and t.relayed


async def _lines(lines):  # type: ignore[no-untyped-def]
    while line := await lines.readline():
        yield line


def test_a_warm_command_imports_no_ssh_library(kept, ssh_hosts):
    assert reuse.start() is not None
    code = f"""
import sys
from pippa_ops.transport import reuse
reuse.configure(True, spawn=False)
from pippa_ops.hosts.connect import connect, ssh_argv
from pippa_ops.runs.records.listing import list_runs
spec, t = connect({ssh_hosts[0].name!r})
with t:
    list_runs(t, spec.remote_dir)
ssh_argv(spec)
print(t.relayed, 'asyncssh' in sys.modules)
"""
    r = subprocess.run([sys.executable, "-c", code], env=kept.env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "False"], r.stderr


def test_a_stale_killed_wedged_or_foreign_keeper_never_hangs_a_command(kept, ssh_hosts):
    name = ssh_hosts[0].name
    path = keeper_client.socket_path()
    path.parent.mkdir(mode=0o700, exist_ok=True)

    def direct_in_bounds() -> None:
        reuse.forget()
        t0 = time.monotonic()
        with connect(name)[1] as t:
            assert t.run("echo ok", check=True).stdout == "ok\n"
            assert isinstance(t, KeeperTransport) and not t.relayed
        assert time.monotonic() - t0 < BOUND_S

    # stale: a socket file nobody listens on
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()
    direct_in_bounds()
    # foreign: something listening that speaks another protocol
    os.unlink(path)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen()

    def babble() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"SSH-2.0-not-a-keeper\r\n")
        conn.recv(100)
        conn.close()

    threading.Thread(target=babble, daemon=True).start()
    direct_in_bounds()
    srv.close()
    os.unlink(path)
    # killed: a keeper that was serving, then SIGKILLed (its socket file stays behind)
    pid = reuse.start()
    assert pid is not None
    with connect(name)[1] as t:
        t.run("true", check=True)
        assert t.relayed
    os.kill(pid, signal.SIGKILL)
    _until(lambda: not _alive(pid), 5)
    assert path.exists()
    direct_in_bounds()
    # wedged: a stopped keeper still accepts connections (backlog) but never answers
    pid = reuse.start()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        direct_in_bounds()
        assert reuse.disconnect() == 0  # ends it by the pid in its lock file
        _until(lambda: not _alive(pid), 5)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    # not private: a runtime dir someone else owns is not used, and not an error
    shutil.rmtree(path.parent)
    path.parent.mkdir()
    os.chown(path.parent, ssh_hosts[0].uid, -1)
    assert reuse.start() is None
    direct_in_bounds()


def test_another_user_cannot_use_the_keeper(kept, ssh_hosts):
    assert reuse.start() is not None
    path = keeper_client.socket_path()
    probe = (
        "import socket,struct,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1])\nexcept OSError as e:\n print('refused',type(e).__name__);sys.exit()\n"
        'q=b\'{"op": "status"}\'\n'
        "s.settimeout(5)\n"
        "try:\n s.sendall(b'Q'+struct.pack('>I',len(q))+q);data=s.recv(100)\n"
        "except OSError:\n data=b''  # hung up on (a reset when the request was left unread)\n"
        "print('answer',repr(data))\n"
    )
    other = ssh_hosts[1]
    r = other.run_as_user([other.python, "-c", probe, str(path)], timeout=30)
    assert r.stdout.split() == ["refused", "PermissionError"], r.stderr
    # Even with the modes loosened, the keeper checks who is calling and says nothing.
    os.chmod(path.parent, 0o711)
    os.chmod(path, 0o666)
    r = other.run_as_user([other.python, "-c", probe, str(path)], timeout=30)
    assert r.stdout.strip() == "answer b''", r.stderr
    assert reuse.status() is not None  # still serving its own user


def test_an_idle_keeper_exits_by_itself(kept, ssh_hosts, monkeypatch):
    monkeypatch.setenv("PIPPA_PERSIST_S", "0.5")
    pid = reuse.start()
    assert pid is not None
    with connect(ssh_hosts[0].name)[1] as t:
        t.run("true", check=True)
    _until(lambda: not _alive(pid), 10)
    assert not keeper_client.socket_path().exists()
    assert list(keeper_client.socket_path().parent.iterdir()) == []  # its lock and empty log went too


def test_logs_follow_through_the_keeper_rides_out_a_dropped_connection(kept, ssh_hosts):
    """The kept connection dies mid-follow: the relay ends as a dropped SSH channel does, the
    follower reconnects (the keeper connects again) and goes on from its offset."""
    h = ssh_hosts[2]
    assert reuse.start() is not None
    job = "for i in $(seq 1 30); do echo n$i; sleep 0.1; done; exit 3"
    r = _pippa(kept, "run", "--host", h.name, "--name", "kdrop", "--cmd", job)
    assert r.returncode == 0, r.stderr
    follower = subprocess.Popen(
        [PIPPA, "logs", "kdrop", "--host", h.name, "-f"],
        env=kept.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None and follower.stderr is not None
    seen = [follower.stdout.readline() for _ in range(5)]
    assert seen[-1] == "n5\n"
    h.drop()
    time.sleep(1.0)
    h.start()
    rest = follower.stdout.read()
    err = follower.stderr.read()
    assert follower.wait(60) == 3
    assert "".join(seen) + rest == "".join(f"n{i}\n" for i in range(1, 31)), err
    assert "reconnecting in" in err and "Traceback" not in err
    assert _host(h.name)["connections"] == 2  # the keeper's own reconnect, not a direct one


def test_a_proxy_jump_host_is_reached_through_the_keeper(kept, ssh_hosts):
    target, hop = ssh_hosts[0], ssh_hosts[1]
    inventory = kept.personal_inventory
    entry = inventory.read_text().split(f"[hosts.{target.name}]\n", 1)[1].split("\n\n", 1)[0]
    inventory.write_text(inventory.read_text() + f'\n[hosts.tj]\n{entry}\nproxy_jump = "{hop.name}"\n')
    assert reuse.start() is not None
    with connect("tj")[1] as t:
        assert t.run("whoami", check=True).stdout.strip() == target.user
        assert isinstance(t, KeeperTransport) and t.relayed
    assert f'"{hop.name}"' in next(h["key"] for h in reuse.status()["hosts"] if h["name"] == "tj")  # type: ignore[index]


def test_the_keepers_ssh_config_answers_follow_an_edited_file(kept, ssh_hosts):
    """The keeper answers each name's lookup once per version of ~/.ssh/config (every command asks for
    every alias): an edit is seen by the next command, the unchanged file answers the same."""
    h = ssh_hosts[0]
    assert reuse.start() is not None
    first = reuse.kept_ssh_config()
    assert first is not None and first.lookup(h.ssh_alias)["hostname"] == h.address
    again = reuse.kept_ssh_config()
    assert again is not None and again.lookup(h.ssh_alias)["hostname"] == h.address
    cfg = kept.home / ".ssh" / "config"
    cfg.write_text(cfg.read_text().replace(f"HostName {h.address}\n", "HostName 127.0.0.99\n", 1))
    reuse.forget()  # the command's own cache is per process: a new command, as a user runs one
    edited = reuse.kept_ssh_config()
    assert edited is not None and edited.lookup(h.ssh_alias)["hostname"] == "127.0.0.99"


def test_the_dashboard_monitor_shares_the_keeper(kept, ssh_hosts):
    from pippa_ops.hosts.inventory import resolve
    from pippa_ops.monitor.host import HostMonitor
    from pippa_ops.monitor.state import GpuSampled, RunsListed

    h = ssh_hosts[1]
    h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
    assert reuse.start() is not None
    events: list[object] = []
    mon = HostMonitor(resolve(h.name), interval_s=0.3, runs_every_s=0.3)
    ended = monitor_loop.start(mon, events.append)
    try:
        _until(lambda: any(isinstance(e, GpuSampled) and len(e.gpus) == 2 for e in events))
        _until(lambda: any(isinstance(e, RunsListed) for e in events))
    finally:
        mon.close()
    assert ended.wait(10), "close() ends the monitor's loops"
    assert _host(h.name)["connections"] == 1 and int(_host(h.name)["commands"]) >= 2  # type: ignore[call-overload]


def test_forward_connects_on_its_own_with_reuse_on(kept, ssh_hosts, tmp_path):
    """Port forwards need channels of their own: with reuse on, `pippa forward` still works."""
    import http.server

    (tmp_path / "hello.txt").write_text("hi there")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    proc = subprocess.Popen(
        [PIPPA, "forward", ssh_hosts[0].name, f"{port}:0"],
        env=kept.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line.startswith("forwarding 127.0.0.1:"), line + (
            proc.stderr.read() if proc.poll() is not None else ""
        )
        local = int(line.split(":")[1].split()[0])
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=20) as r:
            assert r.read() == b"hi there"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()
        server.server_close()
