"""`pippa logs -f` / `run --follow` ride out a dropped connection: nothing lost, nothing repeated."""

from __future__ import annotations

import subprocess
import threading

import pytest

from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import resolve
from pippa_ops.runs.records.follow import follow_to_end

pytestmark = pytest.mark.ssh

WRITER = "for i in $(seq 1 60); do echo line-$i >> ft/out.log; sleep 0.1; done; echo 0 > ft/exit_code"


def test_follow_survives_a_dropped_connection_without_losing_or_repeating_output(ssh_hosts, ssh_env) -> None:
    h = ssh_hosts[1]
    h.run_as_user(["sh", "-c", "rm -rf ft && mkdir ft && : > ft/out.log"]).check_returncode()
    writer = subprocess.Popen(
        ["runuser", "-u", h.user, "--", "sh", "-c", WRITER], cwd=h.home, start_new_session=True
    )
    got = bytearray()
    notes: list[str] = []
    dropped = threading.Event()

    def write(chunk: bytes) -> None:
        got.extend(chunk)
        if b"line-10\n" in got and not dropped.is_set():
            dropped.set()
            h.drop()  # the host goes away mid-stream (sessions killed, listener down) ...
            threading.Timer(1.5, h.start).start()  # ... and comes back

    try:
        follow_to_end(
            lambda: open_transport(resolve(h.name)),
            f"{h.home}/ft/out.log",
            write,
            notes.append,
            end_file=f"{h.home}/ft/exit_code",
            backoff_s=(0.5,),
        ).close()
    finally:
        writer.wait(30)
        h.start()
    assert dropped.is_set() and notes and "reconnecting in 0.5s" in notes[0]
    assert got.decode().split() == [f"line-{i}" for i in range(1, 61)]  # every line, once, in order


def test_logs_follow_and_the_dashboard_wait_by_one_retry_schedule() -> None:
    from pippa_ops.monitor import gpu_feed
    from pippa_ops.monitor import host as monitor
    from pippa_ops.runs.records import follow
    from pippa_ops.transport import retry

    assert [retry.retry_delay(a) for a in (0, 1, 5, 99)] == [1.0, 2.0, 30.0, 30.0]
    assert not hasattr(monitor, "BACKOFF_S") and follow.RECONNECT_BACKOFF_S is retry.RECONNECT_BACKOFF_S
    assert (
        gpu_feed.retry_delay is retry.retry_delay
    )  # the monitor's reconnects (its GPU feed supervises the link)


def test_an_agent_cut_off_before_it_answers_is_an_unreachable_host(ssh_hosts, ssh_env) -> None:
    """The window `pippa wait` once fell into: the connection drops after an agent was started and before
    it answered. That is HostUnreachable (callers that ride out drops reconnect), where it was "follow
    failed on the host (exit -1)"; a command that ends by itself without an exit status (killed on the
    host, the connection alive) stays a failed command."""
    from pippa_ops.errors import HostUnreachable, RemoteCommandFailed
    from pippa_ops.transport import agent_client

    h = ssh_hosts[1]
    with open_transport(resolve(h.name)) as t:
        killed = t.start("kill -9 $$")
        assert not isinstance(agent_client._ended(t, killed, "follow"), HostUnreachable)
        assert isinstance(agent_client._ended(t, killed, "follow"), RemoteCommandFailed)
        waiting = t.start("sleep 30")
        h.drop()
        try:
            err = agent_client._ended(t, waiting, "follow")
        finally:
            h.start()
    assert isinstance(err, HostUnreachable) and "lost the SSH connection" in str(err), err
