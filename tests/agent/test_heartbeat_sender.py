"""The host's heartbeat sender (pippa_agent.alerts.heartbeat) alone, on this machine: a URL nothing
answers costs the watcher no wait and one log line that does not name the URL's secret part. The ping
end to end, from a real host: tests/ops/test_heartbeat_ssh.py."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from pippa_agent.alerts.heartbeat import Sender

TOKEN = "hb-7c1e0d5a"  # the secret part of the heartbeat URL


def _wait(pred: object, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


def test_an_unreachable_heartbeat_url_is_one_log_line_and_never_blocks(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "heartbeat.log"
    sender = Sender(f"http://127.0.0.1:{port}/ping/{TOKEN}", str(log))
    t0 = time.monotonic()
    for suffix in ("/start", "", "", "/fail"):
        sender.ping(suffix, "x")
    assert time.monotonic() - t0 < 0.1  # queued: the caller never waits on the network
    _wait(lambda: sender.pending.empty() and log.exists(), 30, "no log line")
    time.sleep(0.5)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "heartbeat ping failed" in lines[0] and TOKEN not in lines[0]
    assert sender.sent == 0
