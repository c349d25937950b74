"""A warm command reuses a host agent a client lent back, and only one at a request boundary: the
keeper counts requests and answers itself, so a client that left an answer unread (or died) never
hands its agent, and that answer, to the next client."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ClientEnv

from pippa_contract import wire as verbs
from pippa_ops.hosts.connect import connect
from pippa_ops.runs.records.listing import list_runs
from pippa_ops.transport import agent_client, reuse

pytestmark = pytest.mark.ssh


@pytest.fixture
def kept(ssh_env: ClientEnv, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientEnv]:
    run_dir = Path(tempfile.mkdtemp(prefix="pk"))  # short: a Unix socket path has ~100 bytes
    monkeypatch.setenv("PIPPA_RUNTIME_DIR", str(run_dir))
    monkeypatch.delenv("PIPPA_NO_REUSE")
    reuse.configure(True, spawn=False)
    reuse.forget()
    try:
        assert reuse.start() is not None
        yield ssh_env
    finally:
        reuse.disconnect()
        reuse.configure(False)
        reuse.forget()
        shutil.rmtree(run_dir, ignore_errors=True)


def _host(name: str) -> dict[str, int]:
    status = reuse.status()
    assert status is not None, "no keeper answers"
    found = [h for h in status["hosts"] if h["name"] == name]
    return found[0] if found else {"reused": 0, "ahead_used": 0, "commands": 0, "ready": 0}


def _until(check, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _request(verb: str, args: dict[str, object]) -> bytes:
    return agent_client.frame(json.dumps({"verb": verb, "args": args}).encode())


def test_a_lent_agent_answers_the_next_commands(kept, ssh_hosts):
    h = ssh_hosts[0]
    _, t = connect(h.name)
    first = list_runs(t, "~/pippa-reuse")
    for _ in range(3):
        _until(lambda: _host(h.name)["ready"] >= 1)  # the agent lent back (or one started ahead)
        again = list_runs(t, "~/pippa-reuse")
        assert [r.run_id for r in again.runs] == [r.run_id for r in first.runs]
    assert _host(h.name)["reused"] >= 2, _host(h.name)


def test_an_agent_with_an_unread_answer_is_not_lent(kept, ssh_hosts):
    h = ssh_hosts[1]
    _, t = connect(h.name)
    list_runs(t, "~/pippa-reuse")  # warm: the next agent is one lent back or started ahead
    _until(lambda: _host(h.name)["ready"] >= 1)
    reused = _host(h.name)["reused"]
    # A client that asks, claims to be done without reading the answer, and goes.
    proc = t.start(agent_client.command(t))
    proc.write(_request(verbs.PROBE, {}))
    assert proc.read(1) == b"+"
    time.sleep(0.5)  # the probe's answer is on its way or there: either way it is unread
    proc.release()
    # The next clients get their own answers, never the probe's.
    for _ in range(3):
        _until(lambda: _host(h.name)["ready"] >= 1)
        answer = agent_client.call(t, verbs.LIST_RUNS, {"remote_dir": "~/pippa-reuse", "limit": 5})
        assert "runs" in answer, answer
    assert _host(h.name)["reused"] >= reused + 1  # later agents were lent again (the dirty one was not)


def test_a_client_that_dies_mid_request_leaves_no_agent_behind(kept, ssh_hosts):
    h = ssh_hosts[2]
    _, t = connect(h.name)
    list_runs(t, "~/pippa-reuse")
    proc = t.start(agent_client.command(t))
    proc.write(_request(verbs.LIST_RUNS, {"remote_dir": "~/pippa-reuse", "limit": 5})[:3])  # cut short
    proc.close()  # the client's end of the relay goes, as when its process dies
    answer = agent_client.call(t, verbs.LIST_RUNS, {"remote_dir": "~/pippa-reuse", "limit": 5})
    assert "runs" in answer, answer
