"""The keeper's connection pool: per host one SSH connection, a spare channel, and host agents ready.

The connections are ``SSHTransport``s, so the host-key policy (known_hosts, never added silently
without --accept-new, a changed key always refused on every reconnect), identities and ProxyJump are
exactly those of a direct connection. One session channel per host is kept open ahead of time, so a
warm command costs one round trip (exec) before its own traffic. Host agents (the command every
pippa verb starts, ``agent_client.command``, which waits for its first request on stdin) are kept
ready: AHEAD started before they are asked for, and agents lent back by a client that had every
answer it asked for (``keeper_wire.LEND``), so a warm agent request costs one round trip and no new
process on the host. An agent serves one client at a time, and is lent again only at a request
boundary with nothing unread on its channel: a client never sees another's traffic.

Blocking work (connecting, exec, opening channels) runs on the keeper's small worker pool (``run``),
never on a thread of its own per host or per command.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pippa_ops import errors
from pippa_ops.transport import keeper_wire as wire
from pippa_ops.transport._paramiko import paramiko
from pippa_ops.transport.base import CONNECT_TIMEOUT_S
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.ssh import SSHTransport

AHEAD = 2  # host agents kept ready per host (an idle python3 each, waiting on its stdin)
Submit = Callable[[Callable[[], None]], None]  # runs a blocking call on the keeper's workers


@dataclass
class Agent:
    """A host agent's channel kept ready; ``lent``: it answered a client before (no status byte)."""

    command: str
    chan: paramiko.Channel
    lent: bool = False


@dataclass
class Kept:
    """One host's connection, its spare channel, its ready agents, and what the persist timer needs."""

    transport: SSHTransport
    lock: threading.Lock = field(default_factory=threading.Lock)
    spare: paramiko.Channel | None = None
    ready: list[Agent] = field(default_factory=list)
    starting: int = 0  # agents being started ahead now
    out: int = 0  # agents handed to a client, which may lend them back
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)
    connections: list[int] = field(default_factory=list)  # ids of the paramiko Transports seen
    commands: int = 0
    ahead_used: int = 0  # commands that got an agent started ahead
    reused: int = 0  # commands that got an agent lent back by an earlier client

    def connection(self) -> paramiko.Transport:
        t = self.transport.connection()
        with self.lock:
            if not self.connections or self.connections[-1] != id(t):
                self.connections.append(id(t))
        return t

    def close(self) -> None:
        with self.lock:
            spare, self.spare = self.spare, None
            ready, self.ready = self.ready, []
        for chan in [spare, *(a.chan for a in ready)]:
            if chan is not None:
                chan.close()
        self.transport.close()

    def summary(self, key: str, now: float) -> dict[str, Any]:
        return {
            "key": key, "name": self.transport.name, "connections": len(self.connections),
            "commands": self.commands, "ahead_used": self.ahead_used, "reused": self.reused,
            "ready": len(self.ready), "busy": self.busy, "idle_s": round(now - self.last_used, 3),
        }  # fmt: skip


class Pool:
    """Every host's ``Kept``, keyed by the endpoint and the host-key policy of the command."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit
        self._lock = threading.Lock()
        self._kept: dict[str, Kept] = {}

    def acquire(self, ep: Endpoint, accept_new: bool) -> Kept:
        """The host's entry, marked busy (``release`` when done); created on first use."""
        key = json.dumps([ep.as_json(), accept_new])
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = Kept(SSHTransport(ep, accept_new=accept_new))
            kept.busy += 1
            kept.last_used = time.monotonic()
        return kept

    def release(self, kept: Kept) -> None:
        with self._lock:
            kept.busy -= 1
            kept.last_used = time.monotonic()

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            return [k.summary(key, now) for key, k in self._kept.items()]

    def connected(self) -> int:
        with self._lock:
            return sum(1 for k in self._kept.values() if k.connections)

    def empty(self) -> bool:
        with self._lock:
            return not self._kept

    def close_idle(self, persist_s: float) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [k for k, v in self._kept.items() if v.busy == 0 and now - v.last_used > persist_s]
            gone = [self._kept.pop(k) for k in idle]
        for kept in gone:
            kept.close()

    def close_all(self) -> None:
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for k in kept:
            k.close()

    # -------------------------------------------------------------------------------- channels
    def prefetch(self, ep: Endpoint, ahead: str | None) -> None:
        """Connect to a host now (its spare channel, its agents), so the next command finds it warm."""
        kept = self.acquire(ep, False)
        try:
            kept.connection()
            self.refill(kept)
            if ahead:
                self.start_ahead(kept, ahead)
        except Exception:
            pass  # the command that asked went direct; the next one will say what is wrong
        finally:
            self.release(kept)

    def channel(self, kept: Kept) -> paramiko.Channel:
        """The spare channel when it is still good, else a new one (connecting when needed)."""
        t = kept.connection()
        with kept.lock:
            spare, kept.spare = kept.spare, None
        if spare is not None:
            if not spare.closed and spare.get_transport() is t and t.is_active():
                return spare
            spare.close()
        return kept.transport.channel()

    def refill(self, kept: Kept) -> None:
        """Open the next spare channel on a worker (one per host)."""

        def work() -> None:
            with kept.lock:
                if kept.spare is not None:
                    return
            try:
                chan: paramiko.Channel | None = kept.transport.channel()
            except Exception:
                return
            with kept.lock:
                if kept.spare is None:
                    kept.spare, chan = chan, None
            if chan is not None:
                chan.close()

        self._submit(work)

    def exec_on(self, kept: Kept, chan: paramiko.Channel, command: str) -> paramiko.Channel:
        """``command`` started on ``chan``; a host that does not answer within the connect timeout
        (laptop asleep, route gone) is given up, so no client waits forever."""
        fired = threading.Event()

        def give_up() -> None:
            fired.set()
            chan.close()

        # exec waits for the host's reply with no time limit of its own (a short-lived timer thread)
        watchdog = threading.Timer(CONNECT_TIMEOUT_S, give_up)
        watchdog.start()
        try:
            chan.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as e:
            chan.close()
            if fired.is_set():
                kept.transport.close()  # the next command reconnects instead of waiting again
                raise errors.HostUnreachable(
                    f"{kept.transport.name}: lost the SSH connection (no answer within "
                    f"{CONNECT_TIMEOUT_S:.0f}s)"
                ) from e
            raise errors.HostUnreachable(f"{kept.transport.name}: could not start a command: {e}") from e
        finally:
            watchdog.cancel()
        return chan

    def start(self, kept: Kept, command: str, ahead: bool) -> tuple[paramiko.Channel, bool]:
        """A channel running ``command`` and whether it is an agent lent back (it will not send the
        bootstrap's status byte again): a ready agent when ``ahead`` and one is there, else a new one."""
        agent = self._take_ready(kept, command) if ahead else None
        with kept.lock:
            kept.commands += 1
            if ahead:
                kept.out += 1
        if agent is not None:
            return agent.chan, agent.lent
        try:
            chan = self.exec_on(kept, self.channel(kept), command)
        except BaseException:
            if ahead:
                with kept.lock:
                    kept.out -= 1
            raise
        self.refill(kept)
        return chan, False

    def _take_ready(self, kept: Kept, command: str) -> Agent | None:
        t = kept.connection()
        while True:
            with kept.lock:
                if not kept.ready:
                    return None
                agent = kept.ready.pop()  # the newest: lent back agents have loaded what verbs need
            chan = agent.chan
            if agent.command == command and not chan.closed and not chan.exit_status_ready() \
                    and chan.get_transport() is t:  # fmt: skip
                with kept.lock:
                    if agent.lent:
                        kept.reused += 1
                    else:
                        kept.ahead_used += 1
                return agent
            chan.close()

    def returned(self, kept: Kept, command: str, chan: paramiko.Channel | None) -> None:
        """An agent handed out is back: ``chan`` lent back (None: it ended or was not lendable);
        then keep AHEAD ready."""
        with kept.lock:
            kept.out -= 1
            keep = chan is not None and len(kept.ready) < AHEAD
            if keep and chan is not None:
                kept.ready.append(Agent(command, chan, lent=True))
        if chan is not None and not keep:
            chan.close()
        self.start_ahead(kept, command)

    def start_ahead(self, kept: Kept, command: str) -> None:
        """Keep AHEAD host agents ready, counting those out with a client (they may come back). The
        agent's bootstrap reads its first request before it does anything, so one started early is
        indistinguishable from one started on demand. Two: ``logs`` and ``resume`` use two at once."""

        def work() -> None:
            try:
                chan: paramiko.Channel | None = self.exec_on(kept, kept.transport.channel(), command)
            except Exception:
                chan = None
            with kept.lock:
                kept.starting -= 1
                keep = chan is not None and len(kept.ready) < AHEAD
                if keep and chan is not None:
                    kept.ready.insert(0, Agent(command, chan))
            if chan is not None and not keep:
                chan.close()

        with kept.lock:
            missing = max(AHEAD - len(kept.ready) - kept.starting - kept.out, 0)
            kept.starting += missing
        for _ in range(missing):
            self._submit(work)


def status_frame(status: int) -> bytes:
    return wire.frame(wire.EXIT, wire.status_payload(status))
