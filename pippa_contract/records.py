"""JSON records the host rewrites while a run goes on (``attempts.json``): written whole or not at all,
and repaired when a reader finds one torn anyway.

``write_record`` writes a temporary file, fsyncs it and renames it over the record (a reader sees the
old or the new document, never half of one), then appends the same document as one line to the
record's journal (``attempts.json.journal``). ``read_record`` reads the record; when it does not
parse (a full disk that cut a write short on a file system without atomic rename, a copy cut short,
a hand), it takes the journal's last whole line, writes that back as the record and returns it; with
no journal (a run from before journals), ``rebuild`` may make one from the run's output.log.
Python >= 3.8, standard library only (the supervisor and the agent both use it)."""

from __future__ import annotations

import contextlib
import json
import os
import re

JOURNAL_SUFFIX = ".journal"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def _atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_record(path: str, doc: object) -> None:
    """``doc`` as the record at ``path`` (atomically), then as the journal's newest line."""
    line = json.dumps(doc)
    _atomic(path, line.encode() + b"\n")
    fd = os.open(path + JOURNAL_SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"\n" + line.encode() + b"\n")  # a leading newline ends a line a full disk cut
    finally:
        os.close(fd)


def _last_whole(journal: str) -> object | None:
    try:
        with open(journal, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            doc: object = json.loads(raw)
        except ValueError:
            continue
        return doc
    return None


def read_record(path: str, rebuild: Callable[[], object | None] | None = None) -> object | None:
    """The record at ``path`` (None when there is none); a torn one repaired from its journal (or by
    ``rebuild``) and written back whole. None when it is torn and nothing can repair it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        whole: object = json.loads(data)
        return whole
    except ValueError:
        pass
    doc = _last_whole(path + JOURNAL_SUFFIX)
    if doc is None and rebuild is not None:
        doc = rebuild()
    if doc is not None:
        with contextlib.suppress(OSError):  # a read-only or full disk: the repaired one is still the answer
            _atomic(path, json.dumps(doc).encode() + b"\n")
    return doc


# The supervisor's lines in output.log (pippa_agent.supervise): an attempt's banner and its end.
_BANNER = re.compile(r"^pippa: ===== attempt (\d+)/(\d+)(?: from step (\d+))?")
_ENDED = re.compile(r"^pippa: attempt (\d+)/(\d+) (\S+?):? (.*?)\(exit (\d+)\)")


def attempts_from_log(log: str) -> dict[str, Any] | None:
    """An attempts.json document rebuilt from the supervisor's lines in output.log (class, exit code
    and resumed step of each attempt it told; times and decided lines are lost). None: no such line."""
    try:
        with open(log, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    found: dict[int, dict[str, Any]] = {}
    most = 0
    for line in lines:
        m = _BANNER.match(line) or _ENDED.match(line)
        if not m:
            continue
        n, most = int(m.group(1)), max(most, int(m.group(2)))
        a = found.setdefault(n, {"attempt": n, "outcome": "failed", "end": None, "start": None})
        if m.re is _BANNER:
            a["resumed_from_step"] = int(m.group(3)) if m.group(3) else None
        else:
            a.update(
                {"class": m.group(3), "reason": m.group(4).strip() or None, "exit_code": int(m.group(5))}
            )
            a["outcome"] = "stopped" if m.group(3) == "stopped" else "failed"
    if not found:
        return None
    attempts: list[dict[str, Any]] = [found[n] for n in sorted(found)]
    return {"max_attempts": most, "attempts": attempts, "rebuilt_from": "output.log"}
