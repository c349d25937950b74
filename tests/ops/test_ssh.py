"""SSHTransport and connect against real loopback sshd hosts: errors, shared connection, streaming (the
host-key policy, on both ways to a host, is tests/ops/test_host_keys.py)."""

from __future__ import annotations

import contextlib
import functools
import socket
import subprocess
import threading
import time

import pytest
from conftest import PIPPA
from projects import make_project

from pippa_ops.errors import ExitCode, HostUnreachable
from pippa_ops.hosts.connect import connect, open_transport, ssh_argv
from pippa_ops.hosts.endpoint import endpoint
from pippa_ops.hosts.inventory import resolve
from pippa_ops.transport.base import LocalTransport
from pippa_ops.transport.ssh import SSHTransport

pytestmark = pytest.mark.ssh


def test_inventory_host_runs_commands_as_its_user(ssh_env, ssh_hosts):
    h = ssh_hosts[0]
    with connect(h.name)[1] as t:
        r = t.run(["whoami"], check=True)
        assert r.stdout.strip() == h.user
        assert t.home() == str(h.home)
        assert t.expand("~/pippa") == f"{h.home}/pippa"


def test_ssh_config_alias_resolves_hostname_port_user_identity(ssh_env, ssh_hosts):
    h = ssh_hosts[1]
    spec = resolve(h.ssh_alias)
    assert (spec.address, spec.port, spec.user, spec.source) == (h.address, h.port, h.user, "ssh_config")
    with open_transport(spec) as t:
        assert t.run("echo $USER", check=True).stdout.strip() == h.user


def test_channels_from_many_threads_share_one_connection(ssh_env, ssh_hosts):
    t = SSHTransport(endpoint(resolve(ssh_hosts[0].name)))
    seen: list[object] = []
    outs: list[str] = []

    def work(i: int) -> None:
        seen.append(t.connection())
        outs.append(t.run(f"echo {i}", check=True).stdout.strip())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert sorted(outs, key=int) == [str(i) for i in range(8)]
    assert len({id(c) for c in seen}) == 1
    t.close()
    t.close()  # idempotent


def test_direct_connections_share_one_loop_thread_and_close_at_once(ssh_env, ssh_hosts):
    """Every direct connection of a process is read by one asyncio loop thread (``ssh.LoopThread``),
    not a reader thread per host as before: connecting three hosts starts no thread but that loop's
    own (the loop and its bounded pool for name lookups), and close() returns at once."""
    before = {th.ident for th in threading.enumerate()}
    ts = [SSHTransport(endpoint(resolve(h.name))) for h in ssh_hosts[:3]]
    for t in ts:
        assert t.run("echo ok", check=True).stdout == "ok\n"
    new = [th.name for th in threading.enumerate() if th.ident not in before]
    assert all(name.startswith(("pippa-ssh", "asyncio_")) for name in new), new
    t0 = time.monotonic()
    for t in ts:
        t.close()
    assert time.monotonic() - t0 < 0.5
    assert not any(t.conn.alive() for t in ts)


def test_run_feeds_stdin_and_separates_stderr_and_exit_status(ssh_env, ssh_hosts):
    with connect(ssh_hosts[0].name)[1] as t:
        big = b"x" * 3_000_000
        r = t.run("wc -c; echo oops >&2; exit 3", input=big)
        assert (r.stdout.strip(), r.stderr.strip(), r.exit_status) == (str(len(big)), "oops", 3)
        with pytest.raises(TimeoutError):
            t.run("sleep 5", timeout=0.5)


def test_started_process_streams_both_ways_and_can_be_killed(ssh_env, ssh_hosts):
    with connect(ssh_hosts[0].name)[1] as t:
        p = t.start("cat")
        p.write(b"hello\n")
        assert p.readline() == b"hello\n"
        p.close_stdin()
        assert p.read() == b""
        assert p.wait(5) == 0
        p2 = t.start("sleep 31")
        p2.kill()
        left = t.run(
            'for i in $(seq 40); do pgrep -u "$USER" -f "slee[p] 31" || exit 0; sleep 0.05; done; exit 1'
        )
        assert left.exit_status == 0, f"sleep still running: {left.stdout}"


def test_stopped_host_is_unreachable_and_back_after_restart(ssh_env, ssh_hosts):
    h = ssh_hosts[1]
    h.stop()
    with pytest.raises(HostUnreachable, match="connection refused"), connect(h.name)[1] as t:
        t.run("true")
    h.start()
    with connect(h.name)[1] as t:
        t.run("true", check=True)


def test_ssh_argv_reaches_the_same_host_with_strict_keys(ssh_env, ssh_hosts):
    h = ssh_hosts[0]
    argv = ssh_argv(resolve(h.name), tty=False)
    assert "StrictHostKeyChecking=yes" in argv
    r = subprocess.run([*argv, "whoami"], capture_output=True, text=True, timeout=20, env=ssh_env.env)
    assert r.stdout.strip() == h.user, r.stderr


def test_local_host_gets_the_local_transport(ssh_env):
    t = open_transport(resolve("local"))
    assert isinstance(t, LocalTransport)
    assert t.run(["echo", "hi"]).stdout == "hi\n"


def test_failed_handshake_is_one_line_without_a_traceback(client_env, tmp_path):
    """A port that accepts and hangs up: users must see the host as down (hosts) or one error line
    (sync) that says the host closed the connection, nothing more (no library log, no traceback)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = srv.accept()
                conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        port = srv.getsockname()[1]
        client_env.team_inventory.write_text(f'[hosts.mute]\naddress = "127.0.0.1"\nport = {port}\n')
        make_project(tmp_path)
        run = functools.partial(
            subprocess.run, env=client_env.env, cwd=tmp_path, capture_output=True, text=True
        )
        hosts = run([PIPPA, "hosts", "--json"], timeout=60)
        synced = run([PIPPA, "sync", "mute"], timeout=60)
    finally:
        stop.set()
        server.join(5)
        srv.close()
    assert hosts.returncode == 0 and hosts.stderr == "", hosts.stderr
    assert "closed the connection" in hosts.stdout
    assert synced.returncode == ExitCode.UNREACHABLE
    assert "Traceback" not in synced.stderr
    assert synced.stderr.strip().splitlines() == [synced.stderr.strip()]
    assert synced.stderr.startswith("pippa: mute: cannot reach 127.0.0.1")


def test_a_proxy_jump_chain_goes_through_every_hop_and_a_reconnect_closes_the_old_hops(ssh_env, ssh_hosts):
    from dataclasses import replace

    target = resolve(ssh_hosts[0].name)
    t = SSHTransport(endpoint(replace(target, proxy_jump=f"{ssh_hosts[1].name},{ssh_hosts[2].name}")))
    with t:
        assert t.run("whoami", check=True).stdout.strip() == ssh_hosts[0].user
        last = t.conn._jump
        first = last._jump if last else None
        assert last is not None and first is not None
        assert (last.name, first.name) == (ssh_hosts[2].name, ssh_hosts[1].name)  # t2, then t3
        conn = t.connection()
        t.loop.call(conn.close)  # the connection dies: the next command reconnects
        for _ in range(100):
            if not t.conn.alive():
                break
            time.sleep(0.05)
        assert t.run("true").ok
        assert not last.alive() and not first.alive(), "the old hops were closed"
        assert t.conn._jump is not last


def test_hosts_survey_checks_an_alias_of_an_inventory_host_on_the_same_connection(ssh_env, ssh_hosts):
    from dataclasses import replace

    from pippa_ops.provision.survey import survey

    h = ssh_hosts[0]
    named = replace(resolve(h.name), python="/nonexistent/python3")
    alias = resolve(h.ssh_alias)  # the same user@address:port and key, no python set
    opened: list[str] = []

    def counting(spec):
        opened.append(spec.name)
        return open_transport(spec)

    rows = {r.name: r for r in survey([named, alias], counting)}
    assert opened == [h.name]  # one connection and probe for both names
    assert rows[h.name].reachable and rows[h.ssh_alias].reachable
    assert rows[h.name].python_missing == "/nonexistent/python3" and rows[h.ssh_alias].python_missing is None
    assert rows[h.ssh_alias].source == "ssh_config"


def test_a_reader_that_falls_behind_holds_the_sender_back(ssh_env, ssh_hosts):
    """stdout is held here only up to ``HIGH_WATER`` (then the channel stops reading and the SSH
    window fills): 40 MB written to a reader that sleeps stays bounded here, and reads back whole
    (the exit status, which may come first, does not end the stream)."""
    from pippa_ops.transport import ssh

    size = 40_000_000
    with connect(ssh_hosts[0].name)[1] as t:
        p = t.start(f"head -c {size} /dev/zero")
        time.sleep(2)  # the sender runs ahead of a reader that does nothing
        held = len(p._buf)
        assert held <= ssh.HIGH_WATER + (8 << 20), f"{held} bytes held for a reader that did not read"
        got = 0
        while chunk := p.read():
            got += len(chunk)
        assert (got, p.wait(10)) == (size, 0)
