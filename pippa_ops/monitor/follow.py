"""The selected run's metrics and log, and the full-log view: blocking streams in thread workers.

Only the run the user selected is followed (one host at a time), so these are a few threads for the
whole dashboard, not per host. They use the host's link while it is up and resume from their byte
offsets after the GPU feed reconnected it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pippa_contract import rundir as rd
from pippa_contract.rundir import RunDir
from pippa_ops.monitor.link import LOST, Emit, Link
from pippa_ops.monitor.state import LogTail, MetricsParser, RunUpdated
from pippa_ops.runs.records.follow import Follower
from pippa_ops.runs.records.listing import RunRecord
from pippa_ops.transport.shell import validate_name

Sink = Callable[[bytes], None]


class Followers:
    """Follows one run at a time (``select``); a new selection closes the previous run's streams."""

    def __init__(self, link: Link, records: Callable[[], dict[str, RunRecord]]) -> None:
        self.link, self._records = link, records
        self._lock = threading.Lock()
        self._selected: str | None = None
        self._followers: list[Follower] = []

    def select(self, run_id: str | None) -> None:
        """Follow ``run_id`` from now on; stop following the previous run (its stream closes)."""
        with self._lock:
            self._selected = run_id
            followers, self._followers = self._followers, []
        for f in followers:
            f.close()

    def run_dir(self, run_id: str) -> RunDir:
        return RunDir(self.link.spec.remote_dir, validate_name("run", run_id))

    def follow(self, run_id: str, emit: Emit) -> None:
        """Stream the run's metrics.jsonl and output.log (two channels) until it is deselected."""
        parser, tail = MetricsParser(), LogTail()
        lock = threading.Lock()

        def on_chunk(which: str, chunk: bytes | None) -> None:
            with lock:
                if chunk is None:  # metrics.jsonl is about to be read again from byte 0
                    parser.restart()
                    return
                (parser if which == rd.METRICS else tail).feed(chunk)
                detail = parser.detail(self.link.name, run_id, tail.tail())
            emit(RunUpdated(detail))

        log = threading.Thread(target=self._follow_file, args=(run_id, rd.OUTPUT_LOG, on_chunk), daemon=True)
        log.start()
        self._follow_file(run_id, rd.METRICS, on_chunk)
        log.join()

    def _follow_file(self, run_id: str, name: str, on_chunk: Callable[[str, bytes | None], None]) -> None:
        offset = 0
        base = self.run_dir(run_id)
        link = self.link
        while not link.closed.is_set() and self._selected == run_id:
            t = link.live()
            if t is None:
                link.closed.wait(1.0)
                continue
            rec = self._records().get(run_id)
            session = rec.session if rec and rec.active else None
            f = Follower(
                t,
                base.file(name),
                offset,
                end_file=base.exit_code,
                redact=name == rd.OUTPUT_LOG,
                session=session,
            )
            with self._lock:
                if self._selected != run_id:
                    return
                self._followers.append(f)
            try:
                for chunk in f.chunks():
                    on_chunk(name, chunk)
            except LOST as e:
                if self._selected == run_id and not link.lost.is_set():
                    link.lose(e)
            rec = self._records().get(run_id)
            if link.up.is_set() and self._selected == run_id and (rec is None or not rec.active):
                return  # the stream ended because the run did: everything has been read
            # Resume here after a reconnect. metrics.jsonl is read again from 0 instead: a resumed run
            # replaces it (docs/CONTRACTS.md), so a byte offset into it may point into another file;
            # the parser drops its partial line and rebuilds its curves from the first header.
            if name == rd.METRICS:
                on_chunk(name, None)
            else:
                offset = f.offset
            link.closed.wait(1.0)

    def follow_log(self, run_id: str, sink: Sink, cancelled: Callable[[], bool]) -> None:
        """The whole output.log, then what is appended, while ``cancelled()`` is false (full-log view)."""
        t = self.link.live()
        if t is None:
            sink(b"(host unreachable)\n")
            return
        f = Follower(t, self.run_dir(run_id).output_log, 0, redact=True)

        def stop_when_cancelled() -> None:
            while not cancelled() and not self.link.closed.wait(0.2):
                pass
            f.close()

        threading.Thread(target=stop_when_cancelled, daemon=True).start()
        try:
            for chunk in f.chunks():
                sink(chunk)
        except LOST:
            sink(b"\n(connection lost)\n")
