"""The supervisors of one run over several hosts (``pippa run --hosts a,b``) as one group: each host's
supervisor watches its own rank; when an attempt fails on any rank, every rank's attempt ends and the
group decides, from the one failure that came first, whether all retry (with ``--resume``) or give up.

The ranks' supervisors meet over TCP at rank 0's host (the hub: ``run.json``'s ``group`` port, the c10d
port + 1) — the one address every rank already reaches — without a shared file system and without
the laptop (it may sleep). JSON lines:

- rank -> hub: ``{"failed": {"attempt", "rank", "host", "class", "reason", "end", "peer"}}`` when its
  attempt ends badly (or stalls);
- hub -> every rank: ``{"stall": n}`` when attempt ``n`` stalled (rank 0 counts the steps); a rank
  whose job has a stopped process (SIGSTOP) answers with its own ``failed``, which then comes first;
- hub -> every rank: ``{"first": {...}}``, the failure it judged first for that attempt: among the
  reports that came within ``SETTLE_S`` of the first one, the earliest by the hosts' clocks, a rank
  whose trainer only saw a peer go (``peer``: a closed connection, a collective's timeout, rank 0's
  stall: its steps wait on every rank) last.

A rank told of another rank's failure ends its trainer as the stall watch does (SIGINT so it saves
where it can, SIGCONT, then SIGKILL after the grace). Like torch's own c10d store at that host, the
port takes no credentials: a message can only end an attempt, its fields are checked, and nothing in
it reaches a shell. Stdlib only (host code).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable

from pippa_contract import failures as fc

SETTLE_S = 5.0  # the hub waits this long after a failure's report for the other ranks' reports
CONNECT_EVERY_S = 1.0
LINE_MAX = 4096
# what a trainer prints when a peer rank went away under it (gloo, NCCL): a consequence, not a cause
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|DistBackendError|Watchdog caught collective"
    r"|NCCL communicator was aborted|Broken pipe|failed to recv|RendezvousClosedError"
)
_HOST = re.compile(r"^[A-Za-z0-9_.@:+-]{1,200}$")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def group_of(meta: dict[str, Any]) -> tuple[int, list[str], str, int] | None:
    """(rank, hosts, hub address, port) of a run over several hosts, from its run.json; None otherwise."""
    g, hosts, rank = meta.get("group"), meta.get("hosts"), meta.get("machine_rank")
    if not (isinstance(g, dict) and isinstance(hosts, list) and isinstance(rank, int)):
        return None
    addr, port = g.get("addr"), g.get("port")
    if not (isinstance(addr, str) and _HOST.match(addr) and isinstance(port, int) and 0 < port < 65536):
        return None
    return rank, [str(h) for h in hosts], addr, port


def _checked(raw: object, ranks: int) -> dict[str, Any] | None:
    """A failure report with every field checked (a bad one is dropped)."""
    if not isinstance(raw, dict):
        return None
    n, rank, cls, end = raw.get("attempt"), raw.get("rank"), raw.get("class"), raw.get("end")
    if not (isinstance(n, int) and isinstance(rank, int) and 0 <= rank < ranks and cls in fc.CLASSES):
        return None
    if not isinstance(end, (int, float)):
        return None
    host, reason = raw.get("host"), raw.get("reason")
    return {
        "attempt": n,
        "rank": rank,
        "host": host if isinstance(host, str) and _HOST.match(host) else "?",
        "class": cls,
        "reason": str(reason)[:300] if reason is not None else "",
        "end": float(end),
        "peer": raw.get("peer") is True,
    }


class Group:
    """This rank's side of the group; ``first(n)`` is the group's first failure of attempt ``n``."""

    def __init__(
        self,
        rank: int,
        hosts: list[str],
        addr: str,
        port: int,
        stopped: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.rank, self.hosts, self.addr, self.port = rank, hosts, addr, port
        self.stopped = stopped  # why this rank's job is not running (a stopped process), or None
        self.lock = threading.Lock()
        self.firsts: dict[int, dict[str, Any]] = {}
        self.reports: dict[int, list[dict[str, Any]]] = {}  # the hub's, per attempt
        self.peers: list[socket.socket] = []  # the hub's connections to the other ranks
        self.hub: socket.socket | None = None  # a rank's connection to the hub
        self.outbox: list[bytes] = []
        self.closed = False

    def start(self) -> None:
        target = self._serve if self.rank == 0 else self._follow
        threading.Thread(target=target, daemon=True).start()

    # -- what the supervisor calls ---------------------------------------------------------------
    def first(self, n: int) -> dict[str, Any] | None:
        with self.lock:
            return self.firsts.get(n)

    def report(self, n: int, cls: str, reason: str | None, end: float, peer: bool) -> None:
        """This rank's attempt ``n`` failed (or stalled): tell the hub (the hub: itself)."""
        msg = {
            "attempt": n,
            "rank": self.rank,
            "host": self.hosts[self.rank],
            "class": cls,
            "reason": reason or "",
            "end": end,
            "peer": peer,
        }
        if self.rank == 0:
            self._reported(msg)
            return
        self._send_hub(json.dumps({"failed": msg}).encode() + b"\n")

    def wait_first(self, n: int, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while (got := self.first(n)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return got

    def close(self) -> None:
        self.closed = True
        with self.lock:
            socks = [*self.peers, *([self.hub] if self.hub else [])]
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    # -- the hub (rank 0) -------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            srv = socket.create_server(("", self.port), reuse_port=False)
        except OSError as e:
            print(
                f"pippa: group port {self.port} not open ({e}): a failed rank ends the others only through "
                "the trainer's own collectives",
                flush=True,
            )
            return
        srv.settimeout(1.0)
        while not self.closed:
            try:
                conn, _ = srv.accept()
            except socket.timeout:  # TimeoutError from 3.10 on; the host may run 3.8
                continue
            except OSError:
                return
            with self.lock:
                self.peers.append(conn)
                known = list(self.firsts.values())
            for f in known:
                self._send(conn, json.dumps({"first": f}).encode() + b"\n")
            threading.Thread(target=self._read_rank, args=(conn,), daemon=True).start()

    def _read_rank(self, conn: socket.socket) -> None:
        for raw in _lines(conn):
            msg = _checked(raw.get("failed"), len(self.hosts)) if isinstance(raw, dict) else None
            if msg is not None:
                self._reported(msg)

    def _reported(self, msg: dict[str, Any]) -> None:
        n = msg["attempt"]
        with self.lock:
            if n in self.firsts:
                return
            opened = n not in self.reports
            self.reports.setdefault(n, []).append(msg)
            peers = list(self.peers)
        if opened:
            threading.Thread(target=self._decide, args=(n,), daemon=True).start()
        if opened and msg["class"] == fc.STALLED:  # the steps stopped: is a rank's job stopped outright?
            for conn in peers:
                self._send(conn, json.dumps({"stall": n}).encode() + b"\n")

    def _decide(self, n: int) -> None:
        time.sleep(SETTLE_S)
        with self.lock:
            first = min(self.reports[n], key=lambda m: (m["peer"], m["end"]))
            self.firsts[n] = first
            peers = list(self.peers)
        line = json.dumps({"first": first}).encode() + b"\n"
        for conn in peers:
            self._send(conn, line)

    def _send(self, conn: socket.socket, data: bytes) -> None:
        try:
            conn.sendall(data)
        except OSError:
            with self.lock:
                if conn in self.peers:
                    self.peers.remove(conn)

    # -- a rank (1..) -----------------------------------------------------------------------------
    def _follow(self) -> None:
        while not self.closed:
            try:
                conn = socket.create_connection((self.addr, self.port), timeout=5.0)
            except OSError:
                time.sleep(CONNECT_EVERY_S)
                continue
            conn.settimeout(None)
            with self.lock:
                self.hub, pending, self.outbox = conn, self.outbox, []
            for data in pending:
                self._send_hub(data)
            for raw in _lines(conn):
                if not isinstance(raw, dict):
                    continue
                stall = raw.get("stall")
                if isinstance(stall, int) and self.first(stall) is None:
                    why = self.stopped()
                    if why is not None:  # this rank is why the group made no step
                        self.report(stall, fc.STALLED, why, time.time(), False)
                first = _checked(raw.get("first"), len(self.hosts))
                if first is not None:
                    with self.lock:
                        self.firsts.setdefault(first["attempt"], first)
            with self.lock:
                self.hub = None
            time.sleep(CONNECT_EVERY_S)

    def _send_hub(self, data: bytes) -> None:
        with self.lock:
            conn = self.hub
            if conn is None:
                self.outbox.append(data)
                return
        try:
            conn.sendall(data)
        except OSError:
            with self.lock:
                self.outbox.append(data)


def _lines(conn: socket.socket) -> Any:
    """The JSON objects a connection sends, one a line, until it closes (a bad line is skipped)."""
    buf = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            with contextlib.suppress(ValueError):
                yield json.loads(line)
        if len(buf) > LINE_MAX:
            return  # not this protocol


def peer_lost(log_tail: str) -> bool:
    """Whether the attempt's log says a peer rank went away under it (a consequence of another's failure)."""
    return PEER_LOST.search(log_tail) is not None


def first_line(first: dict[str, Any], with_class: bool = True) -> str:
    """``rank 1 (host h100-b) failed first: crash: ...``: what every rank says of the attempt (its
    recorded reason: without the class, which the attempt records beside it)."""
    said = fc.label(first["class"], first["reason"]) if with_class else first["reason"]
    return f"rank {first['rank']} (host {first['host']}) failed first: {said}"
