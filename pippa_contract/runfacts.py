"""What a run directory's files say, as the laptop derives a run's state from them: read on the host
by the agent's ``list_runs`` and on the laptop from a pulled copy (``pippa runs``)."""

from __future__ import annotations

import json
import os
import re

from pippa_contract import rundir as rd
from pippa_contract import runpick
from pippa_contract.metrics import LastRecords, summarize
from pippa_contract.records import attempts_from_log, read_record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_contract.secretprints import Redactor

TAIL_BYTES = 65536
PULL_TAIL = 4096  # bytes before a laptop copy's end that must match for an append-only pull
ERROR_LINE = re.compile(r"(Error|Exception|Traceback|error:|FAILED|Killed|[Ff]atal)")


def read_text(path: str, limit: int = 64) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace").strip()
    except OSError:
        return None


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def tail_bytes(path: str, nbytes: int = TAIL_BYTES) -> bytes:
    """The last ``nbytes`` of a file from a line start (a partial first line is dropped)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - nbytes))
            data = f.read()
    except OSError:
        return b""
    if size <= nbytes:
        return data
    parts = data.split(b"\n", 1)
    return parts[1] if len(parts) > 1 else b""


def tail_lines(path: str, nbytes: int = TAIL_BYTES) -> list[str]:
    """The lines among the last ``nbytes`` of a file (a partial first line is dropped)."""
    data = tail_bytes(path, nbytes)
    return data.decode(errors="replace").split("\n") if data else []


def reason_line(lines: list[str]) -> str | None:
    """The one rule for why a run or an attempt ended, from its log's lines: the last line that reads
    like an error, else the last non-empty one; 300 characters at most. pippa's own banner lines
    (``pippa: ...``) and srun's (``srun: ... Exited with exit code N`` only repeats the exit status)
    are skipped while the job's own lines say more. ``ps``, the supervisor's attempts and the alerts
    all use it."""
    lines = [ln.strip() for ln in lines if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("srun: ", "pippa: "))] or lines
    for line in reversed(lines):
        if ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else None


def error_line(log: str) -> str | None:
    """``reason_line`` of the log's last ``TAIL_BYTES``."""
    return reason_line(tail_lines(log))


def redact_run(run: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """``run`` (run_facts) with every secret taken out of the lines that say why it ended (its error,
    its attempts' reason, its metrics' end error, its last line): the redaction the alerts use
    (``secretprints.Redactor``: today's values and the prints of every secret pushed before), so
    ``ps`` and ``run`` show a job's printed token as ``***`` too, after a rotation as well."""
    if redactor.empty:
        return run
    for key in ("error", "last_line"):
        if isinstance(run.get(key), str):
            run[key] = redactor.line(run[key])
    doc = run.get("attempts")
    tried = doc.get("attempts") if isinstance(doc, dict) else None
    holders = [(a, "reason") for a in tried if isinstance(a, dict)] if isinstance(tried, list) else []
    if isinstance(run.get("end"), dict):
        holders.append((run["end"], "error"))
    for holder, key in holders:
        if isinstance(holder.get(key), str):
            holder[key] = redactor.line(holder[key])
    return run


def last_line(log: str) -> str | None:
    """The log's last non-empty line (what a starting run is doing), from its last 2 KB."""
    lines = [ln.strip() for ln in tail_lines(log, 2048) if ln.strip()]
    return lines[-1][:300] if lines else None


def run_facts(d: str, summary: bool = False) -> dict[str, Any] | None:
    """One run directory's facts (None: not a run); ``summary`` adds the metrics summary."""
    try:
        with open(os.path.join(d, rd.RUN_JSON), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        return None
    exit_text = read_text(os.path.join(d, rd.EXIT_CODE), 16)
    run: dict[str, Any] = {
        "run_id": os.path.basename(d),
        "meta": meta,
        "ctime": mtime(os.path.join(d, rd.RUN_JSON)),
        "tmux_session": read_text(os.path.join(d, rd.TMUX_SESSION)),
        "exit_code": exit_text,
        "ended": mtime(os.path.join(d, rd.EXIT_CODE)),
        "started": read_text(os.path.join(d, rd.STARTED), 32),
        "stop_requested": read_text(os.path.join(d, rd.STOP_REQUESTED), 32),
        "log_time": mtime(os.path.join(d, rd.OUTPUT_LOG)),
        "moved_to": read_text(os.path.join(d, rd.MOVED_TO), 200),
    }
    last = LastRecords()
    last.feed(tail_bytes(os.path.join(d, rd.METRICS)))
    run["steps"], run["end"] = last.steps, last.end
    attempts = os.path.join(d, rd.ATTEMPTS_JSON)  # written by the run's supervisor
    if os.path.exists(attempts):  # a torn one repaired from its journal, or from output.log
        doc = read_record(attempts, lambda: attempts_from_log(os.path.join(d, rd.OUTPUT_LOG)))
        if doc is not None:
            run["attempts"] = doc
    if exit_text is None:  # a run going on: has this stretch's trainer written a line yet (``run``'s watch)?
        run["recording"] = last.begun_since(runpick.num(run["started"]))
        if not run["recording"]:
            run["last_line"] = last_line(os.path.join(d, rd.OUTPUT_LOG))
    if os.path.exists(os.path.join(d, rd.ALARMS_JSON)):  # what the trainer's alarm watch raised
        from pippa_contract.alarms import read_alarms

        run["alarms"] = read_alarms(os.path.join(d, rd.ALARMS_JSON))
    if exit_text not in (None, "0"):
        run["error"] = error_line(os.path.join(d, rd.OUTPUT_LOG))
    if summary:
        run["summary"] = summarize(os.path.join(d, rd.METRICS))
    job = read_text(os.path.join(d, rd.SLURM_JOB), 32)
    if job:
        run["slurm"] = {"job_id": job}  # its state: list_runs asks SLURM once for all its runs
    return run


def tail_digest(path: str, size: int) -> str | None:
    """sha256 of the ``PULL_TAIL`` bytes before ``size``: the laptop's copy is a prefix of the host's
    file when these match (logs and metrics only grow; a resume replaces metrics.jsonl)."""
    import hashlib

    try:
        with open(path, "rb") as f:
            f.seek(max(0, size - PULL_TAIL))
            data = f.read(min(size, PULL_TAIL))
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if len(data) == min(size, PULL_TAIL) else None
