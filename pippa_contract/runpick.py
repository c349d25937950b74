"""Which run a name means on a host: the one rule, followed by the laptop (``pippa_ops.runs.records.listing``)
and by the agent (``read_run``: the listing and the chosen run's output in one request).

A name designates a run id exactly, else a session's runs, else a short id (a unique prefix of 4
characters or more, or a dash tail: ``pippa_ops.runs.records.shortid``). Of the runs it designates, the one
it means is the first running one, else the first queued one, else the newest. The state each needs
comes from the run directory's facts (``runfacts``) and the host's tmux sessions, derived here once.
Imported by the agent on the host: standard library only, nothing slow.
"""

from __future__ import annotations

from pippa_contract.names import NAME_RE, SESSION_RE
from pippa_contract.sessions import identity
from pippa_contract.states import ACTIVE, DIVERGED, FAILED, MOVED, derive_state, slurm_state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Protocol, Sequence, TypeVar

    class Designated(Protocol):
        @property
        def run_id(self) -> str: ...

        @property
        def session(self) -> str: ...

        @property
        def state(self) -> str: ...

    R = TypeVar("R", bound=Designated)

MIN_PREFIX = 4
# A session belongs to a run when it was created within this many seconds of the run's run.json
# (both written by the same launch command); a later session reusing the name does not.
SESSION_MATCH_S = 5.0


def designates(name: str, run_id: str) -> bool:
    """Whether ``name`` (not the whole id) is a short form of ``run_id``: a prefix or a dash tail."""
    if len(name) < MIN_PREFIX or name == run_id:
        return False
    return run_id.startswith(name) or run_id.endswith("-" + name)


def select(runs: Sequence[R], name: str) -> tuple[list[R], list[str]]:
    """The runs ``name`` designates (in ``runs``' order): a run id, a session's runs, or the run a
    short id fits; and, when a short id fits several run ids, those ids, sorted (it is ambiguous)."""
    exact = [r for r in runs if r.run_id == name]
    if exact:
        return exact, []
    if SESSION_RE.fullmatch(name):
        in_session = [r for r in runs if r.session == name]
        if in_session:
            return in_session, []
    short = [r for r in runs if designates(name, r.run_id)]
    ids = sorted({r.run_id for r in short})
    return short, ids if len(ids) > 1 else []


def current(selected: Sequence[R]) -> R | None:
    """The run a selection means: its first running run, else its first queued one, else its last."""
    for state in ACTIVE:
        for r in selected:
            if r.state == state:
                return r
    return selected[-1] if selected else None


# -- states from the facts -------------------------------------------------------------------------
def num(value: object) -> float | None:
    """A number from a file's text (``"1712345678\\n"``), or None."""
    try:
        return float(str(value).split()[0]) if value is not None else None
    except (ValueError, IndexError):
        return None


def session_rows(text: str) -> list[tuple[str, float, int, int, str]]:
    """tmux ``list-sessions -F LIST_FORMAT`` output as (name, created, attached, windows, session id)
    rows; malformed lines are skipped."""
    rows: list[tuple[str, float, int, int, str]] = []
    for line in text.splitlines():
        parts = line.rsplit("|", 4)  # from the right: a name typed by hand may hold a "|"
        if len(parts) != 5:
            continue
        name, created, attached, windows, sid = parts
        try:
            rows.append((name, float(created), int(attached), int(windows), sid))
        except ValueError:
            continue
    return rows


def session_table(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """The sessions as {session: created} and {session: identity} (``$id@created``, as a launch
    records it)."""
    created: dict[str, float] = {}
    idents: dict[str, str] = {}
    for name, at, _attached, _windows, sid in session_rows(text):
        created[name] = at
        idents[name] = identity(sid, at)
    return created, idents


class Fact:
    """A run's id, session, state and sort time, from its facts: what choosing a run needs."""

    __slots__ = ("run_id", "session", "state", "when")

    def __init__(self, run_id: str, session: str, state: str, when: float | None) -> None:
        self.run_id, self.session, self.state, self.when = run_id, session, state, when


def fact(raw: dict[str, Any], sessions: dict[str, float], idents: dict[str, str]) -> Fact | None:
    """A run directory's facts (``runfacts.run_facts``) as its id, session and state; None for a
    directory that is no run (a bad id, no run.json). ``when``: started, else created (host clock)."""
    run_id, meta = raw.get("run_id"), raw.get("meta")
    if not isinstance(run_id, str) or not NAME_RE.fullmatch(run_id) or not isinstance(meta, dict):
        return None
    session = str(meta.get("session", ""))
    ctime = num(raw.get("ctime"))
    created = sessions.get(session)
    if raw.get("tmux_session"):  # the launch recorded its session's identity: exact
        alive = idents.get(session) == str(raw["tmux_session"]).strip()
    else:
        alive = created is not None and ctime is not None and abs(created - ctime) <= SESSION_MATCH_S
    exit_text = str(raw.get("exit_code") or "")
    exit_code = int(exit_text) if exit_text.lstrip("-").isdigit() else None
    started_at = num(raw.get("started"))
    stop_requested = raw.get("stop_requested") is not None
    started = started_at is not None
    state = derive_state(
        session_alive=alive, exit_code=exit_code, started=started, stop_requested=stop_requested
    )
    end = raw.get("end")
    if state == FAILED and isinstance(end, dict) and end.get("status") == "diverged":
        state = DIVERGED  # a NaN/inf loss or reward ended it (training_core); not retried by default
    job = raw.get("slurm")
    if isinstance(job, dict):
        state = slurm_state(
            str(job.get("state") or ""), exit_code=exit_code, started=started, stop_requested=stop_requested
        )
        session = f"slurm:{job.get('job_id')}"
    if raw.get("moved_to") and state not in ACTIVE:
        state = MOVED  # it goes on on another host (pippa resume --on)
    return Fact(run_id, session, state, started_at if started_at is not None else ctime)


def facts(answer: Mapping[str, Any]) -> list[Fact]:
    """A ``list_runs`` answer's runs as facts, oldest first (the order ``pippa ps`` lists them in)."""
    sessions, idents = session_table(str(answer.get("sessions") or ""))
    out = []
    for raw in answer.get("runs") or []:
        f = fact(raw, sessions, idents) if isinstance(raw, dict) else None
        if f is not None:
            out.append(f)
    out.sort(key=lambda f: (f.when or 0.0, f.run_id))
    return out


def choose(answer: Mapping[str, Any], name: str | None) -> str | None:
    """The run id ``name`` means in a ``list_runs`` answer (None: the newest run); None when it means
    none, or when a short id fits several."""
    runs = facts(answer)
    if name is None:
        return runs[-1].run_id if runs else None
    selected, several = select(runs, name)
    if several:
        return None
    chosen = current(selected)
    return chosen.run_id if chosen is not None else None
