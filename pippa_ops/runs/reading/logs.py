"""Where a run's output is and how it is read or followed: ``pippa logs``, ``run -f``, ``resume -f``.

``read_logs`` finds the run a name means (default: the newest run) and its output in as few agent
requests as the hosts allow; ``follow_many`` streams runs' logs in turn, riding out dropped
connections, and gives pippa's exit code from theirs.
"""

from __future__ import annotations

from collections.abc import Callable

from pippa_contract.rundir import RunDir
from pippa_ops.errors import ExitCode, PippaError, RunNotFound
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import LOCAL, HostSpec
from pippa_ops.runs.launching.launch import follow_run
from pippa_ops.runs.moving.locate import all_hosts, every_listing, locate_run, run_hosts
from pippa_ops.runs.records.follow import read_all
from pippa_ops.runs.records.listing import HostRuns, RunRecord, current_run, list_runs, read_run
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import validate_name


class FollowStopped(KeyboardInterrupt):
    """Ctrl-C while following ``run_id``'s log."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def follow_many(
    transport: Transport,
    spec: HostSpec,
    run_ids: list[str],
    session: str,
    write: Callable[[bytes], None],
    note: Callable[[str], None],
    skip: int = 0,
    redact: bool = True,
) -> int:
    """Stream each run's log in turn to ``write``; pippa's exit code from the runs'. ``skip``: bytes of
    the first log not to write (``logs --tail N -f``). Ctrl-C ends the following, not the run: the
    caller gets FollowStopped naming the run it was following."""
    codes: list[int | None] = []
    left = [skip]

    def cut(chunk: bytes) -> None:
        if left[0]:
            n = min(left[0], len(chunk))
            left[0] -= n
            chunk = chunk[n:]
        if chunk:
            write(chunk)

    for run_id in run_ids:
        try:
            code, transport = follow_run(spec, transport, run_id, session, cut, note, redact)
        except KeyboardInterrupt:
            raise FollowStopped(run_id) from None
        codes.append(code)
    transport.close()
    return exit_for(codes)


def exit_for(codes: list[int | None]) -> int:
    """pippa's exit code for runs that ended with ``codes``: 0 when all exited 0, else the last bad one."""
    bad = [c for c in codes if c != 0]
    if not bad:
        return 0
    last = bad[-1]
    return int(ExitCode.FAILURE) if last is None else last


def read_logs(
    name: str | None, host: str | None, redact: bool = True
) -> tuple[RunRecord, bytes, HostSpec, Transport]:
    """The run ``name`` means (default: the newest run) and its output, with the transport to its
    host. ONE agent request (the host's runs, the run the agent chose there by the same rule, its
    output: ``read_run``) with ``--host``, or without it when there is one host besides ``local``.
    With several, a listing of every host then a read of the one: asking them all to read would send
    the output of every host where the name fits (each rank of a run over several hosts, each host's
    ``training`` session). A listing and then a read also when the agent's choice is not the run
    (rank 0 elsewhere). ``redact``: the output with its secrets masked on the host (not for --raw)."""
    listings: dict[str, HostRuns | PippaError] | None = None
    every = all_hosts() if host is None and name is not None else []
    if name is not None and every and len([h for h in every if h != LOCAL]) <= 1:  # local: no network
        wanted = validate_name("run or session", name)
        reads = fan_out(every, lambda h: _read_run_on(h, wanted, redact))
        listings = {h: r if isinstance(r, PippaError) else r[0] for h, r in reads.items()}
        hosts, listed = locate_run(name, host, listings)
        found = reads.get(hosts[0])
        if found is not None and not isinstance(found, PippaError):
            run = current_run(found[0], name)
            if run.run_id == found[1]:
                spec, transport = connect(hosts[0])  # opens only if -f follows on it
                return run, found[2], spec, transport
    elif host is not None:
        try:
            spec, transport = connect(host)
            listed, chosen, text = read_run(transport, spec.remote_dir, name, redact=redact)
        except PippaError as e:
            if name is None:  # as when the newest run is looked for on every host: none there
                raise RunNotFound(f"no runs on {host} (pippa run starts one)") from e
            raise
        try:
            listings = {host: listed}
            name = name or newest_in(listings, host)
            where = run_hosts(name, host, [host], listed)[0]  # a run over several hosts: rank 0's output
            if where == host:
                run = current_run(listed, name)
                if run.run_id != chosen:  # the agent chose otherwise (it cannot, by one rule): read it
                    text = read_all(transport, output_log(spec, run.run_id), redact=redact)
                return run, text, spec, transport
        except BaseException:
            transport.close()
            raise
        transport.close()
    elif name is None:
        listings = every_listing(all_hosts())
        name = newest_in(listings, host)
    hosts, listed = locate_run(name, host, listings)
    where = hosts[0]
    spec, transport = connect(where)
    try:
        runs = listed if listed.host == where else list_runs(transport, spec.remote_dir)
        run = current_run(runs, name)
        return run, read_all(transport, output_log(spec, run.run_id), redact=redact), spec, transport
    except BaseException:
        transport.close()
        raise


def _read_run_on(host: str, name: str, redact: bool) -> tuple[HostRuns, str | None, bytes]:
    spec, transport = connect(host)
    with transport:
        return read_run(transport, spec.remote_dir, name, redact=redact)


def output_log(spec: HostSpec, run_id: str) -> str:
    return RunDir(spec.remote_dir, run_id).output_log


def last_lines(text: bytes, n: int | None) -> bytes:
    """The last ``n`` lines of ``text`` (all of it for None)."""
    if n is None:
        return text
    if n <= 0:
        return b""
    lines = text.splitlines(keepends=True)
    return b"".join(lines[-n:])


def newest_in(listings: dict[str, HostRuns | PippaError], host: str | None) -> str:
    """The id of the newest run in these listings (``pippa logs`` with no name)."""
    runs = [r for res in listings.values() if not isinstance(res, PippaError) for r in res.runs]
    if not runs:
        raise RunNotFound("no runs on " + (host or "any host") + " (pippa run starts one)")
    return max(runs, key=lambda r: (r.started or 0.0, r.run_id)).run_id
