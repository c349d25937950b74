"""Which host has run X: one listing per host (in parallel), shared by every verb that takes a run or
session name (logs, stop, attach, resume, pull, wait, compare, rm). Unknown or on several hosts: a
typed error naming it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from pippa_ops.errors import AmbiguousSession, PippaError, RunNotFound, SessionNotFound
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import LOCAL, load_inventory
from pippa_ops.runs.moving.stale import Say, live_hosts, settle
from pippa_ops.runs.records.cost import priced_on
from pippa_ops.runs.records.listing import HostRuns, RunRecord, current_run, list_runs, select_runs
from pippa_ops.transport.shell import validate_name


def all_hosts() -> list[str]:
    """``local`` and every inventory host: where a run named without ``--host`` is looked for."""
    return [LOCAL, *sorted(load_inventory())]


def runs_of(name: str) -> HostRuns:
    """A host's runs (one agent round trip), with what they cost where the host has a price."""
    spec, transport = connect(name)
    with transport:
        return priced_on(spec, transport, list_runs(transport, spec.remote_dir))


def every_listing(hosts: Sequence[str]) -> dict[str, HostRuns | PippaError]:
    """Each host's runs (in parallel), a stale copy of a run that moved on ended first (runs.moving.stale):
    every look at all the hosts goes through here."""
    return settle(fan_out(list(hosts), runs_of))


def _live(found: dict[str, HostRuns], name: str) -> dict[str, HostRuns]:
    """Of the listings that have ``name``, the ones with its live copy (a moved run's old host left out)."""
    keep = live_hosts([(h, select_runs(r, name)) for h, r in found.items()])
    return {h: r for h, r in found.items() if h in keep}


def locate_run(
    name: str, host: str | None, listings: dict[str, HostRuns | PippaError] | None = None
) -> tuple[list[str], HostRuns]:
    """The hosts of run/session ``name`` (one host, or every host of a run over several, rank 0
    first), and the listing that found it, of the host it names first unless a group's rank 0 is
    elsewhere: a verb that goes on to read the run there needs no second listing. ``listings``: the
    hosts' listings when the caller has them already (each host is then not listed again)."""
    if host is not None:
        known = (listings or {}).get(host)
        listed = known if isinstance(known, HostRuns) else runs_of(host)
        return run_hosts(name, host, [host], listed), listed
    having = _listings_having(name, listings)
    if not having:
        raise RunNotFound(f"no host has a run or session named {name!r}")
    where = list(having)
    listed = having[where[0]]
    return run_hosts(name, host, where, listed), listed


def run_hosts(name: str, host: str | None, where: list[str], listed: HostRuns) -> list[str]:
    """``locate_run`` from the listings in hand: ``where``, the hosts that have ``name`` (``host``
    alone when it was given), and ``listed``, the first one's runs; a run over several hosts is all
    of them, rank 0 first."""
    runs = select_runs(listed, name)
    group = next((r.hosts for r in runs if r.hosts and len(r.hosts) > 1), None)
    if group is not None and (host is not None or set(where) <= set(group)):
        return list(group)
    if len(where) > 1:
        raise AmbiguousSession(f"{name!r} exists on several hosts ({', '.join(where)}); add --host")
    return where


def locate_run_hosts(name: str, host: str | None) -> list[str]:
    """The hosts of run/session ``name``: one host, or every host of a run over several (rank 0 first)."""
    return locate_run(name, host)[0]


def hosts_having(name: str) -> list[str]:
    return list(_listings_having(name))


def _listings_having(
    name: str, listings: dict[str, HostRuns | PippaError] | None = None
) -> dict[str, HostRuns]:
    """The listings of the hosts that have run/session ``name``, in ``all_hosts`` order (of
    ``listings``, the hosts' listings in that order, when given)."""
    validate_name("run or session", name)
    found = every_listing(all_hosts()) if listings is None else settle(listings)
    return _live(
        {h: r for h, r in found.items() if not isinstance(r, PippaError) and select_runs(r, name)}, name
    )


def locate_host(name: str, host: str | None, *, live_session: bool = False) -> str:
    """The host where run/session ``name`` is: ``host`` when given, else the only one that has it."""
    validate_name("run or session", name)
    if host is not None:
        return host
    found: list[str] = []
    having: dict[str, HostRuns] = {}
    for h, result in every_listing(all_hosts()).items():
        if isinstance(result, PippaError):
            continue
        if live_session:
            if name in result.sessions or any(r.run_id == name and r.active for r in result.runs):
                found.append(h)
        elif select_runs(result, name):
            having[h] = result
    found += list(_live(having, name))
    if not found:
        kind = SessionNotFound if live_session else RunNotFound
        raise kind(f"no host has a {'live session' if live_session else 'run or session'} named {name!r}")
    if len(found) > 1:
        raise AmbiguousSession(f"{name!r} exists on several hosts ({', '.join(found)}); add --host")
    return found[0]


def locate(names: Sequence[str], host: str | None = None) -> dict[str, RunRecord]:
    """For each run id (or session: its current run), the record on the one host that has it; one
    listing per host for all names. Unknown or on several hosts: a typed error naming it."""
    for name in names:
        validate_name("run or session", name)
    hosts = [host] if host else all_hosts()
    results = every_listing(hosts)
    if host is not None and isinstance(results[host], PippaError):
        raise results[host]  # type: ignore[misc]
    found: dict[str, RunRecord] = {}
    for name in names:
        having = {h: r for h, r in results.items() if not isinstance(r, PippaError) and select_runs(r, name)}
        where = list(_live(having, name).values())
        if not where:
            down = [h for h, r in results.items() if isinstance(r, PippaError)]
            unasked = f"; not reachable: {', '.join(down)}" if down else ""
            raise RunNotFound(f"no host has a run or session named {name!r} (see `pippa ps`){unasked}")
        if len(where) > 1:
            raise AmbiguousSession(
                f"{name!r} exists on several hosts ({', '.join(w.host for w in where)}); add --host"
            )
        found[name] = current_run(where[0], name)
    return found


STALE_POLL_S = 5.0  # wait's look at the host a run moved away from, until it answers


def watch_return(
    old_host: str,
    live_host: str,
    run_id: str,
    done: threading.Event,
    say: Say | None = None,
    poll_s: float = STALE_POLL_S,
) -> threading.Thread:
    """``wait`` after run ``run_id`` moved from ``old_host``, which did not answer, to ``live_host``:
    look at the old host every ``poll_s`` until it answers, then end the run's stale copy there if it
    has one (``settle``). A daemon thread; ``done`` ends it early."""

    def loop() -> None:
        while not done.wait(poll_s):
            listings = fan_out([old_host, live_host], runs_of)
            old = listings[old_host]
            if isinstance(old, PippaError):
                continue  # not back yet
            if not any(r.active for r in old.runs if r.run_id == run_id):
                return  # it had ended there, or was ended already
            if isinstance(listings[live_host], HostRuns):
                settle(listings, say)
                return

    t = threading.Thread(target=loop, daemon=True, name=f"stale-{run_id}")
    t.start()
    return t
