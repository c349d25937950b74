"""Run records on a host: read every run directory in ONE remote command and derive each run's state.

A run's state comes from its files (docs/CONTRACTS.md) plus the host's tmux sessions, never from
memory on the laptop, so ``ps``, ``logs`` and the dashboard agree and a finished run stays
inspectable after its session is gone. Times are the host's clock (file mtimes, ``date +%s`` in the
same command), so a skewed laptop clock does not make durations lie.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

from pippa_ops.errors import RunNotFound
from pippa_ops.shell import NAME_RE, SESSION_RE
from pippa_ops.tmux import LIST_FORMAT, parse_sessions
from pippa_ops.transport import Transport

# A session belongs to a run when it was created within this many seconds of the run's run.json
# (both written by the same launch command); a later session reusing the name does not.
SESSION_MATCH_S = 5.0
DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class RunRecord:
    """One run as ``ps`` shows it."""

    host: str
    run_id: str
    session: str
    recipe: str | None
    command: str
    state: str  # running | queued | finished | stopped | killed | cancelled | lost
    exit_code: int | None = None
    started: float | None = None  # host unix time the job began (launch time while queued)
    ended: float | None = None
    duration_s: float | None = None
    stop_requested: float | None = None
    last_step: int | None = None
    last_reward: float | None = None
    commit: str | None = None
    dirty: bool | None = None
    sweep_index: int | None = None
    sweep_size: int | None = None

    @property
    def label(self) -> str:
        return self.recipe or self.command

    @property
    def active(self) -> bool:
        return self.state in ("running", "queued")

    @property
    def state_text(self) -> str:
        if self.state in ("finished", "stopped") and self.exit_code is not None:
            return f"{self.state} (exit {self.exit_code})"
        return self.state

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label, "state_text": self.state_text}


@dataclass(frozen=True)
class HostRuns:
    host: str
    now: float  # host clock
    sessions: dict[str, float] = field(default_factory=dict)  # live tmux session -> created
    identities: dict[str, str] = field(default_factory=dict)  # live tmux session -> "$id@created"
    runs: tuple[RunRecord, ...] = ()


def runs_dir_word(remote_dir: str) -> str:
    """``<remote_dir>/runs`` as one shell word, with a leading ``~`` expanded by the host's shell."""
    from pippa_ops.shell import sh_path

    return sh_path(remote_dir.rstrip("/") + "/runs")


def list_script(remote_dir: str, marker: str, limit: int = DEFAULT_LIMIT) -> str:
    """The one shell command that prints every run record, each line tagged with ``marker``."""
    m = marker
    return f"""echo "{m}NOW $(date +%s)"
tmux list-sessions -F '{LIST_FORMAT}' 2>/dev/null | sed 's/^/{m}SESSION /'
cd {runs_dir_word(remote_dir)} 2>/dev/null || exit 0
for d in $(ls -1d -- */ 2>/dev/null | tail -n {int(limit)}); do
  d=${{d%/}}
  [ -f "$d/run.json" ] || continue
  echo "{m}RUN $d"
  printf '%s' "{m}JSON "; tr -d '\\n' < "$d/run.json"; echo
  echo "{m}CTIME $(stat -c %Y "$d/run.json")"
  [ -f "$d/tmux_session" ] && echo "{m}TMUX $(head -c 64 "$d/tmux_session")"
  [ -f "$d/exit_code" ] && echo "{m}EXIT $(head -c 16 "$d/exit_code") $(stat -c %Y "$d/exit_code")"
  [ -f "$d/started" ] && echo "{m}STARTED $(head -c 32 "$d/started")"
  [ -f "$d/stop_requested" ] && echo "{m}STOP $(head -c 32 "$d/stop_requested")"
  [ -f "$d/output.log" ] && echo "{m}LOGTIME $(stat -c %Y "$d/output.log")"
  [ -f "$d/metrics.jsonl" ] && tail -c 65536 "$d/metrics.jsonl" | grep '"type": *"step"' \\
    | tail -n 2 | sed 's/^/{m}STEP /'
done
exit 0"""


def _num(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _last_step(lines: list[str]) -> tuple[int | None, float | None]:
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a partial last line: ignore it until its newline arrives
        if isinstance(rec, dict) and rec.get("type") == "step":
            step = rec.get("step")
            reward = rec.get("reward/mean", rec.get("reward"))
            return (
                int(step) if isinstance(step, int | float) else None,
                float(reward) if isinstance(reward, int | float) else None,
            )
    return None, None


def derive_state(
    *,
    session_alive: bool,
    exit_code: int | None,
    started: bool,
    stop_requested: bool,
) -> str:
    """The run's state from its files and whether its own tmux session is alive (pure)."""
    if exit_code is not None:
        return "stopped" if stop_requested else "finished"
    if session_alive:
        return "running" if started else "queued"
    if stop_requested:
        return "killed" if started else "cancelled"
    return "lost"  # no exit status, no session, nobody asked it to stop (host reboot, tmux killed)


def _record(
    host: str,
    run_id: str,
    raw: dict[str, list[str]],
    now: float,
    sessions: dict[str, float],
    idents: dict[str, str],
) -> RunRecord | None:
    try:
        meta = json.loads(raw["JSON"][0])
    except (KeyError, IndexError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    session = str(meta.get("session", ""))
    ctime = _num(raw.get("CTIME", [""])[0])
    created = sessions.get(session)
    if "TMUX" in raw:  # the launch recorded its session's identity: exact
        alive = idents.get(session) == raw["TMUX"][0].strip()
    else:
        alive = created is not None and ctime is not None and abs(created - ctime) <= SESSION_MATCH_S
    exit_code: int | None = None
    ended: float | None = None
    if "EXIT" in raw:
        parts = raw["EXIT"][0].split()
        if parts and parts[0].lstrip("-").isdigit():
            exit_code = int(parts[0])
            ended = _num(parts[1]) if len(parts) > 1 else None
    started_host = _num(raw.get("STARTED", [""])[0])
    stop = _num(raw.get("STOP", [""])[0]) if "STOP" in raw else None
    state = derive_state(
        session_alive=alive,
        exit_code=exit_code,
        started=started_host is not None,
        stop_requested="STOP" in raw,
    )
    if ended is None and state in ("killed", "lost"):
        ended = _num(raw.get("LOGTIME", [""])[0])
    started = started_host if started_host is not None else ctime
    duration = None
    if started_host is not None:
        duration = max(0.0, (ended if ended is not None else now) - started_host)
    step, reward = _last_step(raw.get("STEP", []))
    raw_sync = meta.get("sync")
    sync: dict[str, Any] = raw_sync if isinstance(raw_sync, dict) else {}
    return RunRecord(
        host=host,
        run_id=run_id,
        session=session,
        recipe=meta.get("recipe"),
        command=str(meta.get("command", "")),
        state=state,
        exit_code=exit_code,
        started=started,
        ended=ended,
        duration_s=duration,
        stop_requested=stop,
        last_step=step,
        last_reward=reward,
        commit=sync.get("commit"),
        dirty=sync.get("dirty"),
        sweep_index=meta.get("sweep_index"),
        sweep_size=meta.get("sweep_size"),
    )


def parse_listing(host: str, text: str, marker: str) -> HostRuns:
    """Parse ``list_script`` output (pure; unit-tested on captured text)."""
    now = 0.0
    sessions: dict[str, float] = {}
    idents: dict[str, str] = {}
    blocks: list[tuple[str, dict[str, list[str]]]] = []
    for line in text.splitlines():
        if not line.startswith(marker):
            continue
        tag, _, rest = line[len(marker) :].partition(" ")
        if tag == "NOW":
            now = _num(rest) or 0.0
        elif tag == "SESSION":
            for info in parse_sessions(rest):
                sessions[info.name] = info.created
                idents[info.name] = info.identity
        elif tag == "RUN":
            blocks.append((rest.strip(), {}))
        elif blocks:
            blocks[-1][1].setdefault(tag, []).append(rest)
    runs = []
    for run_id, raw in blocks:
        if not NAME_RE.fullmatch(run_id):
            continue
        rec = _record(host, run_id, raw, now, sessions, idents)
        if rec is not None:
            runs.append(rec)
    runs.sort(key=lambda r: (r.started or 0.0, r.run_id))
    return HostRuns(host=host, now=now, sessions=sessions, identities=idents, runs=tuple(runs))


def list_runs(transport: Transport, remote_dir: str, limit: int = DEFAULT_LIMIT) -> HostRuns:
    """Every run record on the host (the last ``limit`` run dirs), in one remote command."""
    marker = "@@" + secrets.token_hex(4) + ":"
    result = transport.run(list_script(remote_dir, marker, limit), timeout=60).check()
    return parse_listing(transport.name, result.stdout, marker)


def select_runs(host_runs: HostRuns, name: str) -> list[RunRecord]:
    """Runs that ``name`` designates on this host: a run id, or a session's runs (newest last)."""
    exact = [r for r in host_runs.runs if r.run_id == name]
    if exact:
        return exact
    if SESSION_RE.fullmatch(name):
        return [r for r in host_runs.runs if r.session == name]
    return []


def current_run(host_runs: HostRuns, name: str) -> RunRecord:
    """The run ``name`` means: that run id, or the session's running run, else its latest."""
    runs = select_runs(host_runs, name)
    if not runs:
        raise RunNotFound(f"{host_runs.host}: no run or session named {name!r} (see `pippa ps`)")
    for state in ("running", "queued"):
        active = [r for r in runs if r.state == state]
        if active:
            return active[0]
    return runs[-1]
