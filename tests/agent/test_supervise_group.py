"""The ranks' supervisors of a run over several hosts meet over real loopback TCP
(pippa_agent.supervise.group): the hub names the failure that came first, a rank that only saw a peer
go counts last, every rank hears the verdict within a bounded time, and a message that does not check
out is dropped."""

from __future__ import annotations

import json
import socket
import time

import pytest

from pippa_agent.supervise import group as grp

HOSTS = ["h100-a", "h100-b", "h100-c"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ranks(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grp, "SETTLE_S", 0.5)
    port = _free_port()
    stopped = {2: "its job is stopped (pid 4242, state T: SIGSTOP or a debugger)"}  # rank 2's job, stopped
    members = [grp.Group(r, HOSTS, "127.0.0.1", port, stopped=lambda r=r: stopped.get(r)) for r in range(3)]
    for m in members:
        m.start()
    time.sleep(1.5)  # the ranks connect (they retry every second until the hub listens)
    yield members
    for m in members:
        m.close()


def test_the_rank_that_failed_first_is_named_to_every_rank_and_a_peers_victim_counts_last(ranks) -> None:  # type: ignore[no-untyped-def]
    hub, one, two = ranks
    now = time.time()
    # rank 0's trainer saw its peer go (a closed connection) before rank 2's own crash was reported
    hub.report(1, "crash", "RuntimeError Connection closed by peer", now - 1.0, peer=True)
    two.report(1, "crash", "RuntimeError boom", now, peer=False)
    sent = time.monotonic()
    firsts = [m.wait_first(1, 10.0) for m in ranks]
    assert time.monotonic() - sent < grp.SETTLE_S + 3.0  # bounded: the settle time and a poll
    assert all(f is not None and (f["rank"], f["host"], f["class"]) == (2, "h100-c", "crash") for f in firsts)
    assert grp.first_line(firsts[1]) == "rank 2 (host h100-c) failed first: crash: RuntimeError boom"  # type: ignore[arg-type]
    assert one.first(2) is None  # a later attempt is its own


def test_among_direct_failures_the_earliest_by_its_end_time_is_first(ranks) -> None:  # type: ignore[no-untyped-def]
    hub, one, two = ranks
    now = time.time()
    two.report(3, "stalled", "no new metrics line for 10s", now, peer=False)
    one.report(3, "crash", "killed", now - 2.0, peer=False)
    assert (hub.wait_first(3, 10.0) or {}).get("rank") == 1


def test_a_stall_seen_at_rank_0_is_put_down_to_the_rank_whose_job_is_stopped(ranks) -> None:  # type: ignore[no-untyped-def]
    hub, one, _ = ranks
    hub.report(4, "stalled", "no new metrics line for 10s", time.time(), peer=True)  # as the supervisor does
    first = one.wait_first(4, 10.0)
    assert first is not None and (first["rank"], first["class"]) == (2, "stalled"), first
    assert first["reason"].startswith("its job is stopped"), first


def test_a_message_that_does_not_check_out_is_dropped(ranks) -> None:  # type: ignore[no-untyped-def]
    hub = ranks[0]
    with socket.create_connection(("127.0.0.1", hub.port)) as s:
        for bad in (
            {"failed": {"attempt": 1, "rank": 7, "class": "crash", "end": 1.0}},  # no such rank
            {"failed": {"attempt": 1, "rank": 1, "class": "rm -rf", "end": 1.0}},  # no such class
            {"failed": {"attempt": "1", "rank": 1, "class": "crash", "end": 1.0}},
        ):
            s.sendall(json.dumps(bad).encode() + b"\n")
        s.sendall(b"not json\n")
        time.sleep(grp.SETTLE_S + 1.0)
    assert hub.first(1) is None


def test_group_of_reads_run_json_and_refuses_a_bad_address() -> None:
    meta = {"hosts": HOSTS[:2], "machine_rank": 1, "group": {"addr": "10.0.0.1", "port": 29501}}
    assert grp.group_of(meta) == (1, HOSTS[:2], "10.0.0.1", 29501)
    assert grp.group_of({**meta, "group": {"addr": "a;rm -rf /", "port": 29501}}) is None
    assert grp.group_of({"hosts": HOSTS[:2], "machine_rank": 0}) is None  # no policy: no group
