"""``pippa wait`` on a terminal: one line, rewritten in place, with each run's host, step/total and
elapsed time. A thread polls the hosts (the first time with the metrics summary, for the total);
what it cannot learn it leaves as it was. Off the terminal, nothing is drawn."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, TextIO

from pippa_contract import verbs
from pippa_ops.runs.records.listing import RunRecord, host_runs
from pippa_ops.runs.records.shortid import short_ids
from pippa_ops.transport.base import Transport

POLL_S = 2.0


def status_text(records: Mapping[str, RunRecord], totals: Mapping[str, int | None]) -> str:
    """``a3f9 on h100-a: step 42/200 · running · 3m12s`` per run (its elapsed time on the host's
    clock, as of the last poll), joined with "  |  "."""
    names = short_ids([r.run_id for r in records.values()])
    parts = []
    for r in records.values():
        total = totals.get(r.run_id)
        step = "-" if r.last_step is None else str(r.last_step)
        steps = f"step {step}/{total}" if total else f"step {step}"
        elapsed = "" if r.duration_s is None else f" · {_elapsed(r.duration_s)}"
        parts.append(f"{names[r.run_id]} on {r.host}: {steps} · {r.state}{elapsed}")
    return "  |  ".join(parts)


def _elapsed(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class StatusLine:
    """The line and the thread that keeps it current; ``stop()`` clears it."""

    def __init__(self, records: Mapping[str, RunRecord], stream: TextIO) -> None:
        self.records = dict(records)
        self.stream = stream
        self.totals: dict[str, int | None] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="wait-status")

    def start(self) -> StatusLine:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.clear()

    def moved(self, new: RunRecord) -> None:
        """A run moved to another host (``--failover``): the line reads its live copy from now on."""
        for name, rec in list(self.records.items()):
            if rec.run_id == new.run_id:
                self.records[name] = new

    def clear(self) -> None:
        """Blank the line (before another line is printed; the next poll draws it again)."""
        with self._lock:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def note(self, message: str) -> None:
        """``pippa: message`` on a line of its own (a reconnect), never run into the live line."""
        with self._lock:
            self.stream.write(f"\r\x1b[Kpippa: {message}\n")
            self.stream.flush()

    def _loop(self) -> None:
        from pippa_ops.hosts.connect import connect
        from pippa_ops.transport import agent_client

        open_: dict[str, tuple[str, Transport]] = {}  # host -> (remote_dir, its transport)
        first = True
        try:
            while not self._stop.is_set():
                for host in sorted({r.host for r in self.records.values()}):
                    try:
                        if host not in open_:
                            spec, transport = connect(host)
                            open_[host] = (spec.remote_dir, transport)
                        remote_dir, transport = open_[host]
                        answer = verbs.list_runs(agent_client.Once(transport), remote_dir, summary=first)
                    except Exception:  # a host that does not answer now: the line keeps what it had
                        gone = open_.pop(host, None)
                        if gone is not None:
                            gone[1].close()
                        continue
                    self._update(host, answer)
                first = False
                self._draw()
                self._stop.wait(POLL_S)
        finally:
            for _, transport in open_.values():
                transport.close()

    def _update(self, host: str, answer: Mapping[str, Any]) -> None:
        fresh = {r.run_id: r for r in host_runs(host, answer).runs}
        for raw in answer.get("runs") or []:
            summary = raw.get("summary") if isinstance(raw, dict) else None
            if isinstance(summary, dict) and summary.get("max_steps"):
                self.totals[str(raw.get("run_id"))] = int(summary["max_steps"])
        for name, rec in self.records.items():
            if rec.host == host and rec.run_id in fresh:
                self.records[name] = fresh[rec.run_id]

    def _draw(self) -> None:
        line = status_text(self.records, self.totals)
        with self._lock:
            if not self._stop.is_set():
                self.stream.write("\r\x1b[K" + line)
                self.stream.flush()
