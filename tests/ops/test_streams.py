"""A started process's stdout through one buffer: lines in blocks, mixed reads lose nothing, deadlines."""

from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from pippa_ops.hosts.connect import connect
from pippa_ops.transport.base import LocalTransport, Process
from pippa_ops.transport.keeper import wire as keeper_wire

MIXED = "printf 'a\\nbc\\nrest'"


def _mixed_reads(p: Process) -> list[bytes]:
    return [p.readline(), p.read(1), p.readline(), p.read(), p.read()]


def test_local_read_and_readline_share_one_buffer_so_no_byte_is_lost() -> None:
    with LocalTransport().start(MIXED) as p:
        assert _mixed_reads(p) == [b"a\n", b"b", b"c\n", b"rest", b""]


def test_ssh_read_and_readline_share_one_buffer_so_no_byte_is_lost(ssh_env, ssh_hosts) -> None:
    with connect(ssh_hosts[0].name)[1] as t, t.start(MIXED) as p:
        assert _mixed_reads(p) == [b"a\n", b"b", b"c\n", b"rest", b""]


def test_readline_pulls_blocks_not_single_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalTransport().start("seq 1000") as p:
        p.wait(10)  # all 1000 lines are in the pipe before the first read
        raw_reads = 0
        inner = p._read_raw

        def counting(n: int) -> bytes:
            nonlocal raw_reads
            raw_reads += 1
            return inner(n)

        monkeypatch.setattr(p, "_read_raw", counting)
        lines = list(iter(p.readline, b""))
    assert lines == [f"{i}\n".encode() for i in range(1, 1001)]
    assert raw_reads <= 3, f"{raw_reads} raw reads for 1000 lines"


def test_local_read_past_its_deadline_raises_timeout_instead_of_blocking() -> None:
    with LocalTransport().start("sleep 10") as p:
        p.set_deadline(time.monotonic() + 0.3)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            p.readline()
        assert time.monotonic() - t0 < 8  # long before the 10 s sleep ends


def test_waits_work_on_descriptors_numbered_past_1024() -> None:
    """select() refuses a descriptor >= 1024 (FD_SETSIZE); a keeper or dashboard holding many
    connections gets there. Both waits that once used it (a local process's deadline read and the
    keeper wire's frame read) are given such a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 1100")
    resource.setrlimit(
        resource.RLIMIT_NOFILE,
        (max(soft, 1100) if hard == resource.RLIM_INFINITY else min(max(soft, 1100), hard), hard),
    )
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1030)]
    try:
        a, b = socket.socketpair()
        assert a.fileno() >= 1024
        b.sendall(keeper_wire.frame(b"J", b"payload"))
        assert keeper_wire.FrameReader(a).next(deadline=time.monotonic() + 5) == (b"J", b"payload")
        with LocalTransport().start("echo hi; sleep 10") as p:
            p.set_deadline(time.monotonic() + 5)
            assert p.readline() == b"hi\n"
        a.close()
        b.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
