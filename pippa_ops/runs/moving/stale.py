"""A failover that never trains twice: the copy of a run left on a host it moved away from.

``--failover`` (runs.moving.failover) moves a run whose host stayed unreachable from the laptop's pulled copy;
the old host may only have lost its network, and its copy of the run trains on. When that host answers
again, the first pippa command that lists both hosts (``ps``, the look-up of every verb that takes a
run, ``wait``'s watch of the host it moved away from) sees two copies of one run id: the one on the
host the live copy's run.json names as ``moved_from`` is stale. It is ended at once, without the
Ctrl-C that would have it finish a step and log it (no grace: the hang-up ends its trainer, so it
writes no metrics row and logs nothing to W&B after it is seen), marked ``moved_to`` the live copy's
host (``ps`` then says ``moved to HOST2``), and told once (a line and PIPPA_NOTIFY). Its checkpoints
stay aside in its own directory on the old host, which nothing resumes from: the run goes on from the
live copy's. Until it is ended (the stop failed), ``ps`` flags it ``stale copy``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pippa_contract import states
from pippa_ops.errors import PippaError
from pippa_ops.runs.records.listing import HostRuns, RunRecord

Say = Callable[[str], None]


@dataclass(frozen=True)
class Stale:
    record: RunRecord  # the copy still going on the host the run moved away from
    live_host: str  # where the run goes on


def stale_copies(listings: Mapping[str, HostRuns | PippaError]) -> list[Stale]:
    """The stale copies among the hosts' listings (pure): a run still going on host A while another
    host's copy of the same run id names A as ``moved_from`` and moved nowhere since (a run moved
    from A to B and back to A is live on A)."""
    by_id: dict[str, list[RunRecord]] = {}
    for listed in listings.values():
        if isinstance(listed, HostRuns):
            for r in listed.runs:
                by_id.setdefault(r.run_id, []).append(r)
    out = []
    for copies in by_id.values():
        for r in copies:
            if not r.active:
                continue
            newer = next(
                (
                    o
                    for o in copies
                    if o.host != r.host
                    and o.moved_from == r.host
                    and o.moved_to is None
                    and r.moved_from != o.host
                ),
                None,
            )
            if newer is not None:
                out.append(Stale(r, newer.host))
    return out


def live_hosts(where: list[tuple[str, list[RunRecord]]]) -> list[str]:
    """Of the hosts that have a run (each with the records a name designates there), the ones with
    its live copy: a host whose copies all moved to another of them is left out, so a moved run's
    id (or short id) means its live copy for ``logs``, ``why`` and ``resume``."""
    hosts = {h for h, _ in where}

    def moved_on(recs: list[RunRecord]) -> bool:
        return bool(recs) and all(r.state == states.MOVED and r.moved_to in hosts for r in recs)

    keep = [h for h, recs in where if not moved_on(recs)]
    return keep or [h for h, _ in where]


def end_stale(stale: Stale) -> None:
    """End the stale copy at once (no grace) and mark it ``moved_to`` the live copy's host."""
    from pippa_contract import verbs
    from pippa_contract.rundir import MOVED_TO, RunDir
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.launching.launch import stop
    from pippa_ops.transport import agent_client

    rec = stale.record
    spec, transport = connect(rec.host)
    with transport:
        path = f"{RunDir(spec.remote_dir, rec.run_id).path}/{MOVED_TO}"
        verbs.write_file(agent_client.Once(transport), path, stale.live_host + "\n")
        stop(spec, transport, rec.run_id, grace_s=0.0)


def default_say(line: str) -> None:
    """The line on stderr and the alert where PIPPA_NOTIFY is set (as for a run's end)."""
    from pippa_ops.notify import bell_line

    bell_line(line)
    from pippa_ops.alerts.local import send

    error = send(line)
    if error is not None:
        bell_line(f"alert to PIPPA_NOTIFY failed: {error}")


def settle(
    listings: Mapping[str, HostRuns | PippaError], say: Say | None = None
) -> dict[str, HostRuns | PippaError]:
    """End every stale copy in ``listings`` (``end_stale``), tell each once, and return the listings
    with those copies as they now are (``moved``); a copy that could not be ended stays flagged
    ``stale_of`` (``ps``: ``stale copy``) for the next command to try again."""
    found = stale_copies(listings)
    if not found:
        return dict(listings)
    tell = say or default_say
    now: dict[tuple[str, str], RunRecord] = {}
    for s in found:
        rec = s.record
        try:
            end_stale(s)
        except PippaError as e:
            now[(rec.host, rec.run_id)] = replace(rec, stale_of=s.live_host)
            tell(
                f"{rec.host}: run {rec.run_id} is a stale copy (it moved to {s.live_host}) and could not "
                f"be stopped: {str(e).splitlines()[0]}"
            )
            continue
        now[(rec.host, rec.run_id)] = replace(rec, state=states.MOVED, moved_to=s.live_host)
        tell(
            f"{rec.host}: run {rec.run_id} came back as a stale copy of the run on {s.live_host}; "
            f"stopped it (moved to {s.live_host}; its checkpoints stay on {rec.host})"
        )
    out: dict[str, HostRuns | PippaError] = {}
    for host, listed in listings.items():
        if isinstance(listed, HostRuns):
            listed = replace(listed, runs=tuple(now.get((host, r.run_id), r) for r in listed.runs))
        out[host] = listed
    return out
