"""The keeper's connection pool: per host one SSH connection and host agents ready.

The connections are ``sshconn.HostConn``s, the same connect as a direct connection's: the command's
``Endpoint`` and the one host-key policy (known_hosts, never added silently without --accept-new, a
changed key always refused on every reconnect). Host agents (the command every pippa verb starts,
``agent_client.command``, which says its status byte and waits for its first request on stdin) are
kept ready: AHEAD started before they are asked for, and agents lent back by a client that had every
answer it asked for (``wire.LEND``), so a warm agent request costs one round trip and no new process
on the host. An agent serves one client at a time, and is lent again only at a request boundary with
nothing unread on its channel: a client never sees another's traffic.

Everything here runs on the keeper's event loop: no locks, no thread per host or per command.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from pippa_ops import errors
from pippa_ops.transport.base import CONNECT_TIMEOUT_S
from pippa_ops.transport.endpoint import Endpoint
from pippa_ops.transport.sshconn import Chan, HostConn

AHEAD = 2  # host agents kept ready per host (an idle python3 each, waiting on its stdin)


@dataclass
class Agent:
    """A host agent's channel kept ready; ``lent``: it answered a client before (no status byte)."""

    command: str
    chan: Chan
    lent: bool = False


@dataclass
class Kept:
    """One host's connection, its ready agents, and what the persist timer needs."""

    conn: HostConn
    ready: list[Agent] = field(default_factory=list)
    starting: int = 0  # agents being started ahead now
    out: int = 0  # agents handed to a client, which may lend them back
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)
    commands: int = 0
    ahead_used: int = 0  # commands that got an agent started ahead
    reused: int = 0  # commands that got an agent lent back by an earlier client
    home: str | None = None

    def close(self) -> None:
        ready, self.ready = self.ready, []
        for agent in ready:
            agent.chan.close()
        self.conn.close()

    def summary(self, key: str, now: float) -> dict[str, Any]:
        return {
            "key": key,
            "name": self.conn.name,
            "connections": self.conn.opened,
            "commands": self.commands,
            "ahead_used": self.ahead_used,
            "reused": self.reused,
            "ready": len(self.ready),
            "busy": self.busy,
            "idle_s": round(now - self.last_used, 3),
        }


class Pool:
    """Every host's ``Kept``, keyed by the endpoint and the host-key policy of the command."""

    def __init__(self) -> None:
        self._kept: dict[str, Kept] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def acquire(self, ep: Endpoint, accept_new: bool) -> Kept:
        """The host's entry, marked busy (``release`` when done); created on first use."""
        key = json.dumps([ep.as_json(), accept_new])
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = Kept(HostConn(ep, accept_new, CONNECT_TIMEOUT_S))
        kept.busy += 1
        kept.last_used = time.monotonic()
        return kept

    def release(self, kept: Kept) -> None:
        kept.busy -= 1
        kept.last_used = time.monotonic()

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [k.summary(key, now) for key, k in self._kept.items()]

    def connected(self) -> int:
        return sum(1 for k in self._kept.values() if k.conn.alive())

    def empty(self) -> bool:
        return not self._kept

    def close_idle(self, persist_s: float) -> None:
        now = time.monotonic()
        idle = [k for k, v in self._kept.items() if v.busy == 0 and now - v.last_used > persist_s]
        for key in idle:
            self._kept.pop(key).close()

    def close_all(self) -> None:
        kept, self._kept = list(self._kept.values()), {}
        for k in kept:
            k.close()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -------------------------------------------------------------------------------- channels
    async def prefetch(self, ep: Endpoint, ahead: str | None) -> None:
        """Connect to a host now (and start its agents), so the next command finds it warm."""
        kept = self.acquire(ep, False)
        try:
            await kept.conn.connection()
            if ahead:
                self.start_ahead(kept, ahead)
        except (errors.PippaError, ValueError):
            pass  # the command that asked went direct; the next one will say what is wrong
        finally:
            self.release(kept)

    async def start(self, kept: Kept, command: str, ahead: bool) -> tuple[Chan, bool]:
        """A channel running ``command`` and whether it is an agent lent back (it will not send the
        bootstrap's status byte again): a ready agent when ``ahead`` and one is there, else a new one."""
        agent = self._take_ready(kept, command) if ahead else None
        kept.commands += 1
        if ahead:
            kept.out += 1
        if agent is not None:
            return agent.chan, agent.lent
        try:
            chan = await kept.conn.exec(command)
        except BaseException:
            if ahead:
                kept.out -= 1
            raise
        return chan, False

    def _take_ready(self, kept: Kept, command: str) -> Agent | None:
        while kept.ready:
            agent = kept.ready.pop()  # the newest: lent back agents have loaded what verbs need
            ok = agent.chan.idle(fresh=not agent.lent) and kept.conn.owns(agent.chan)
            if agent.command == command and ok:
                if agent.lent:
                    kept.reused += 1
                else:
                    kept.ahead_used += 1
                return agent
            agent.chan.close()
        return None

    def returned(self, kept: Kept, command: str, chan: Chan | None) -> None:
        """An agent handed out is back: ``chan`` lent back (None: it ended or was not lendable);
        then keep AHEAD ready."""
        kept.out -= 1
        if chan is not None:
            if len(kept.ready) < AHEAD and chan.idle():
                kept.ready.append(Agent(command, chan, lent=True))
            else:
                chan.close()
        self.start_ahead(kept, command)

    def start_ahead(self, kept: Kept, command: str) -> None:
        """Keep AHEAD host agents ready, counting those out with a client (they may come back). The
        agent's bootstrap reads its first request before it does anything but say its status byte,
        so one started early is indistinguishable from one started on demand. Two: ``logs`` and
        ``resume`` use two at once."""

        async def work() -> None:
            try:
                chan: Chan | None = await kept.conn.exec(command)
            except (errors.PippaError, ValueError):
                chan = None
            finally:
                kept.starting -= 1
            if chan is not None:
                if len(kept.ready) < AHEAD:
                    kept.ready.insert(0, Agent(command, chan))
                else:
                    chan.close()

        missing = max(AHEAD - len(kept.ready) - kept.starting - kept.out, 0)
        kept.starting += missing
        for _ in range(missing):
            self._spawn(work())

    async def home(self, kept: Kept) -> str:
        """The host's $HOME (asked once per connection entry)."""
        if kept.home is None:
            chan = await kept.conn.exec('printf %s "$HOME"')
            out = bytearray(chan.held)
            chan.sink = out.extend
            ended = chan.until(lambda: chan.closed or (chan.eof and chan.status is not None))
            try:
                await asyncio.wait_for(ended, CONNECT_TIMEOUT_S * 3)
            except TimeoutError as e:
                chan.close()
                raise errors.HostUnreachable(f"{kept.conn.name}: no answer to a $HOME query") from e
            if chan.status != 0:
                why = chan.err.decode(errors="replace").strip()
                raise errors.HostUnreachable(f"{kept.conn.name}: $HOME query failed ({chan.status}): {why}")
            kept.home = out.decode(errors="replace").strip()
        return kept.home
