"""``pippa wait``: block until runs end, riding out dropped connections, for scripts and notices.

Each run is watched by one ``follow`` of its ``exit_code`` file on the host (the agent ends the stream
when the file exists or the run's tmux session is gone), so the laptop does not poll and learns of the
end within the agent's check interval. A dropped connection is reconnected with the same backoff as
``logs -f``. Runs are watched in parallel, so each one's end is told as it happens; the run's
record is read once more at the end for its state and exit code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pippa_contract.rundir import RunDir
from pippa_contract.termsafe import escape
from pippa_ops.errors import AuthFailed, ExitCode, HostUnreachable, PippaError, WaitTimeout
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import HostSpec, resolve
from pippa_ops.runs.records.follow import Follower, dropped_during_auth
from pippa_ops.runs.records.listing import RunRecord, current_run, list_runs
from pippa_ops.transport.base import Transport
from pippa_ops.transport.retry import RECONNECT_BACKOFF_S, retry_delay

Note = Callable[[str], None]
FailOver = Callable[[RunRecord, str], RunRecord]  # (the run, why) -> its record on the host it moved to


class HostStaysLost(HostUnreachable):
    """The run's host stayed unreachable past ``lost_after_s`` (a ``--failover`` run moves on)."""


def wait_run(
    spec: HostSpec,
    run: RunRecord,
    *,
    deadline: float | None = None,
    note: Note = lambda _m: None,
    backoff_s: Sequence[float] = RECONNECT_BACKOFF_S,
    opener: Callable[[HostSpec], Transport] = open_transport,
    lost_after_s: float | None = None,
) -> RunRecord:
    """The run's final record once it has ended; WaitTimeout when ``deadline`` (monotonic) passes;
    HostStaysLost when the host stayed unreachable for ``lost_after_s``."""
    exit_file = RunDir(spec.remote_dir, run.run_id).exit_code
    failures, lost_since = 0, None
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise WaitTimeout(f"{spec.name}: run {run.run_id} had not ended when the timeout passed")
        transport: Transport | None = None
        try:
            try:
                transport = opener(spec)
            except AuthFailed as e:  # the run was found over this host's connection a moment ago
                raise dropped_during_auth(e) from e
            follower = Follower(transport, exit_file, end_file=exit_file, session=run.session)
            timer = threading.Timer(left, follower.close) if left is not None else None
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                for _ in follower.chunks():
                    failures, lost_since = 0, None
            finally:
                if timer is not None:
                    timer.cancel()
            if deadline is not None and time.monotonic() >= deadline:
                continue  # the timer ended the follow: raised above
            return current_run(list_runs(transport, spec.remote_dir), run.run_id)
        except HostUnreachable as e:
            lost_since = time.monotonic() if lost_since is None else lost_since
            if lost_after_s is not None and time.monotonic() - lost_since >= lost_after_s:
                gone = time.monotonic() - lost_since
                raise HostStaysLost(f"{spec.name} unreachable for {gone:.0f}s") from e
            wait = retry_delay(failures, backoff_s)
            failures += 1
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            note(f"{e}; reconnecting in {wait:g}s (the run goes on; Ctrl-C stops waiting)")
            time.sleep(wait)
        finally:
            if transport is not None:
                transport.close()


def wait_runs(
    runs: Mapping[str, RunRecord],
    *,
    timeout_s: float | None = None,
    on_end: Callable[[RunRecord], None] = lambda _r: None,
    note: Note = lambda _m: None,
    backoff_s: Sequence[float] = RECONNECT_BACKOFF_S,
    failover: tuple[Callable[[RunRecord], str | None], FailOver, float] | None = None,
    on_left_lost: Callable[[RunRecord, RunRecord], None] = lambda _old, _new: None,
) -> dict[str, RunRecord | PippaError]:
    """Wait for every run in parallel (name -> its record when found); ``on_end`` as each ends.
    ``failover``: (why a run must move, the move, how long its host may stay unreachable): a run
    that must move is moved and waited for on its new host (runs.moving.failover); ``on_left_lost`` (its
    record on the host that stayed unreachable, its record where it went) after such a move, whose
    old host may come back with a copy still going (runs.moving.stale)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    specs = {rec.host: resolve(rec.host) for rec in runs.values()}

    def one(name: str) -> RunRecord:
        rec = runs[name]
        while True:
            spec = specs.get(rec.host) or resolve(rec.host)
            lost_after = failover[2] if failover is not None and rec.failover else None
            try:
                final = wait_run(
                    spec, rec, deadline=deadline, note=note, backoff_s=backoff_s, lost_after_s=lost_after
                )
            except HostStaysLost as e:
                assert failover is not None
                lost, rec = rec, failover[1](rec, str(e))
                on_left_lost(lost, rec)
                continue
            why = failover[0](final) if failover is not None else None
            if failover is None or why is None:
                on_end(final)
                return final
            rec = failover[1](final, why)

    out: dict[str, RunRecord | PippaError] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(runs))))
    try:
        futures = {name: pool.submit(one, name) for name in runs}
        for name, fut in futures.items():
            try:
                out[name] = fut.result()
            except PippaError as e:
                out[name] = e
    except BaseException:  # Ctrl-C: the caller says what goes on; the watchers are not waited for
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return out


def exit_status(results: Mapping[str, RunRecord | PippaError]) -> int:
    """What ``pippa wait`` exits with: a timeout's 124 first, then like ``logs -f``: 0 when every run
    exited 0, else the last failing run's exit code (1 for a run without one: killed, lost)."""
    errors = [r for r in results.values() if isinstance(r, PippaError)]
    if errors:
        timeouts = [e for e in errors if isinstance(e, WaitTimeout)]
        return int((timeouts or errors)[0].exit_code)
    bad = [r.exit_code for r in results.values() if isinstance(r, RunRecord) and r.exit_code != 0]
    if not bad:
        return 0
    return int(ExitCode.FAILURE) if bad[-1] is None else int(bad[-1])


def ended_line(rec: RunRecord) -> str:
    """The one line that tells a run's end: ``h1: run X (tiny) finished (exit 0) after 1m02s``."""
    what = f" ({rec.label})" if rec.label else ""
    took = ""
    if rec.duration_s is not None:
        s = int(rec.duration_s)
        took = f" after {s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f" after {s // 60}m{s % 60:02d}s"
    return escape(f"{rec.host}: run {rec.run_id}{what} {rec.state_text}{took}")  # host strings: escaped
