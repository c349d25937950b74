"""samples.jsonl (docs/CONTRACTS.md): what the model wrote, with its rewards, a bounded sample of
some steps' batches. training_core writes it; the agent's ``samples`` verb, ``pippa samples`` and the
dashboard read it from its end (``select``), so a long run's file answers as fast as a short one's.

One JSON object per line (``sample_row``), appended and flushed line by line; a reader ignores a last
line without its newline. Rows come in step order. A resume moves the rows of the steps it redoes to
``samples.superseded.jsonl`` (``redone``, the metrics rule); the writer keeps the two files under the
run's cap by dropping the superseded file, then thinning the oldest steps (``thin_plan``), never the
newest one.
"""

from __future__ import annotations

import itertools
import json
import os
import re

from pippa_contract.rundir import SAMPLES as SAMPLES
from pippa_contract.rundir import SAMPLES_SUPERSEDED as SAMPLES_SUPERSEDED

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent imports this module on the host
    from typing import Any, Callable, Dict, Iterable, Iterator

    Row = Dict[str, Any]

SAMPLE = "sample"  # the rows' "type"
TRAIN, EVAL, SELFPLAY = "train", "eval", "selfplay"  # the rows' "kind"
MAX_TEXT = 2000  # characters kept of each text field (prompt, completion, answer, each transcript line)
THIN_TO = 0.8  # a thinning brings the files to this share of the cap, so it is rare
BLOCK = 1 << 16  # bytes read at a time from the end


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """At most ``limit`` characters, the cut said: a row stays small whatever the model wrote."""
    return text if len(text) <= limit else f"{text[:limit]}…[+{len(text) - limit} chars]"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def sample_row(
    step: int,
    kind: str,
    prompt: str,
    completion: str,
    *,
    index: int = 0,
    rewards: dict[str, Any] | None = None,
    reward: Any = None,
    advantage: Any = None,
    length: int | None = None,
    truncated: bool | None = None,
    answer: Any = None,
    passed: bool | None = None,
    transcript: Iterable[str] | None = None,
    redact: Callable[[str], str] | None = None,
    time: float | None = None,
) -> Row:
    """One row: ``{"type": "sample", "step", "time", "kind", "index", "prompt", "completion",
    "rewards": {function: value}, "reward": weighted total, "advantage", "length": completion tokens,
    "truncated"}``, plus ``"answer"``/``"passed"`` for an evaluation and ``"transcript"`` for a game.
    Text goes through ``redact`` (the writer's: the host's secrets taken out with
    ``pippa_contract.alerts.redact_secrets``, as alerts are) and is clipped (``MAX_TEXT``); a
    non-finite number is null."""
    import time as _time

    def text(value: Any) -> str:
        raw = value if isinstance(value, str) else str(value)
        return clip(redact(raw) if redact is not None else raw)

    row: Row = {
        "type": SAMPLE,
        "step": int(step),
        "time": _time.time() if time is None else time,
        "kind": kind,
        "index": int(index),
        "prompt": text(prompt),
        "completion": text(completion),
        "rewards": {str(k): _number(v) for k, v in (rewards or {}).items()},
        "reward": _number(reward),
        "advantage": _number(advantage),
        "length": None if length is None else int(length),
        "truncated": None if truncated is None else bool(truncated),
    }
    if answer is not None:
        row["answer"] = text(answer)
    if passed is not None:
        row["passed"] = bool(passed)
    if transcript is not None:
        row["transcript"] = [text(t) for t in transcript]
    return row


def encode(row: Row) -> bytes:
    """One line (ASCII JSON: no raw control byte in the file; a reader escapes what it prints)."""
    return json.dumps(row, ensure_ascii=True).encode() + b"\n"


def parse(raw: bytes) -> Row | None:
    """A line as a row; None for a torn or foreign line."""
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(rec, dict) or rec.get("type") != SAMPLE:
        return None
    step = rec.get("step")
    return rec if isinstance(step, int) and not isinstance(step, bool) else None


def redone(raw: bytes, resumed_from_step: int) -> bool:
    """Writer side: does a resume from ``resumed_from_step`` redo this row (its step is past it)? A
    torn line is redone too (the kill cut it); a foreign line stays."""
    if not raw.strip():
        return False
    row = parse(raw)
    if row is None:
        try:
            json.loads(raw)
        except ValueError:
            return True
        return False
    return int(row["step"]) > resumed_from_step


def thin_plan(step_bytes: list[tuple[int, int]], budget: int) -> set[int]:
    """The steps to drop so the rest fit ``budget`` bytes: keep the steps that are multiples of a
    stride (twice the smallest gap between sampled steps, doubled until they fit), plus the first and
    the newest. What stays is an even spread over the whole run; the steps written since the last
    thinning stay dense until the next one, so the older a step, the thinner its neighbourhood.
    ``step_bytes``: each step and its rows' bytes, oldest first."""
    size = dict(step_bytes)
    order = [s for s, _ in step_bytes]
    if sum(size.values()) <= budget or len(order) < 3:
        return set()
    gaps = [b - a for a, b in zip(order, order[1:]) if b > a]
    stride = 2 * max(1, min(gaps)) if gaps else 2
    while True:
        keep = {s for s in order if s % stride == 0} | {order[0], order[-1]}
        if sum(size[s] for s in keep) <= budget or len(keep) <= 2:
            return set(order) - keep
        stride *= 2


# -- reading from the end ------------------------------------------------------------------------


def lines_backward(path: str, end: int | None = None) -> Iterator[bytes]:
    """The file's complete lines, last first, read in blocks from the end (a last line without its
    newline is not yet a line); from byte ``end`` (a line start) when given."""
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END) if end is None else end
        carry = b""
        first = end is None
        while pos > 0:
            n = min(BLOCK, pos)
            pos -= n
            f.seek(pos)
            parts = (f.read(n) + carry).split(b"\n")
            carry = parts[0]
            rest = parts[1:]
            if first and rest:
                rest = rest[:-1]  # after the last newline: nothing, or a line still being written
                first = False
            elif first:
                carry = b""  # no newline yet in the last block: all of it is the partial line so far
                continue
            yield from reversed(rest)
        if carry and not first:
            yield carry


_STEP = re.compile(rb'"step": (-?\d+)')


def _step_at(f: Any, offset: int) -> tuple[int, int | None]:
    """The first whole line at or after ``offset``: its start and its step (None: no row there)."""
    f.seek(offset)
    if offset:
        f.readline()  # the rest of the line ``offset`` fell in
    while True:
        start = f.tell()
        raw = f.readline()
        if not raw.endswith(b"\n"):
            return start, None
        m = _STEP.search(raw, 0, 64)
        if m is not None:
            return start, int(m.group(1))


def end_of_step(path: str, step: int) -> int:
    """The byte offset where the rows after ``step`` begin (rows are in step order): a bisection of
    the file, so ``--step`` on a large file reads a few blocks, not everything after it."""
    with open(path, "rb") as f:
        lo, hi = 0, f.seek(0, os.SEEK_END)
        while hi - lo > BLOCK:
            mid = (lo + hi) // 2
            start, s = _step_at(f, mid)
            if s is None or s > step:
                hi = mid
            else:
                lo = mid
        start, s = _step_at(f, lo)
        while s is not None and s <= step:
            start, s = _step_at(f, f.tell())
        return start


def _rows(path: str, offset: int | None, forward: bool = False) -> Iterator[Row]:
    """Rows backward from ``offset`` (None: the end), or, ``forward``, the rows from ``offset`` on."""
    if not forward:
        for raw in lines_backward(path, offset):
            row = parse(raw)
            if row is not None:
                yield row
        return
    with open(path, "rb") as f:
        f.seek(offset or 0)
        for raw in f:
            row = parse(raw) if raw.endswith(b"\n") else None
            if row is not None:
                yield row


def rows_backward(path: str, needle: str | None = None) -> Iterator[Row]:
    """The file's rows, last first; with ``needle``, only rows whose prompt, completion or answer
    holds it (lines are checked as bytes first, so a search of a large file parses few rows)."""
    raw_needle = json.dumps(needle, ensure_ascii=True)[1:-1].encode() if needle else None
    for raw in lines_backward(path):
        if raw_needle is not None and raw_needle not in raw:
            continue
        row = parse(raw)
        if row is None:
            continue
        if needle and not any(needle in str(row.get(k, "")) for k in ("prompt", "completion", "answer")):
            continue
        yield row


def _order(rows: list[Row], best: bool, worst: bool) -> list[Row]:
    if best or worst:

        def key(r: Row) -> tuple[bool, float]:
            v = _number(r.get("reward"))
            return (v is None, -(v or 0.0) if best else (v or 0.0))

        return sorted(rows, key=key)
    return sorted(rows, key=lambda r: (r.get("kind") != TRAIN, str(r.get("kind")), r.get("index", 0)))


def select(
    path: str,
    step: int | None = None,
    n: int = 8,
    best: bool = False,
    worst: bool = False,
    grep: str | None = None,
    kind: str | None = None,
) -> Row:
    """What ``pippa samples`` shows: ``{"rows", "step", "prev", "next", "size"}``. The rows of
    ``step`` (None: the newest sampled step), ``best``/``worst`` first by total reward, at most
    ``n``; ``prev``/``next``: the sampled steps around it. With ``grep``: the newest ``n`` rows that
    hold the text (of ``step`` only when given). ``kind`` keeps one kind of row (train, eval, selfplay).
    A missing file answers no rows."""
    out: Row = {"rows": [], "step": step, "prev": None, "next": None, "size": 0}
    try:
        out["size"] = os.path.getsize(path)
    except OSError:
        return out
    rows: list[Row] = []
    if grep:
        for row in rows_backward(path, grep):
            if (step is None or row["step"] == step) and (kind is None or row.get("kind") == kind):
                rows.append(row)
                if len(rows) >= n:
                    break
        out["rows"] = _order(rows, best, worst)[:n] if (best or worst) else rows
        return out
    target = step
    end = None
    if step is not None:  # start right after the step's rows; the row there is the next step
        end = end_of_step(path, step)
        later = itertools.islice(_rows(path, end, forward=True), 1000)
        after = next((r for r in later if kind is None or r.get("kind") == kind), None)
        out["next"] = after["step"] if after is not None else None
    for row in _rows(path, end):
        if kind is not None and row.get("kind") != kind:
            continue
        s = row["step"]
        if target is None:
            target = s
        if s == target:
            rows.append(row)
        elif s > target:
            out["next"] = s
        else:
            out["prev"] = s
            break
    out["step"] = target
    out["rows"] = _order(rows, best, worst)[:n]
    return out


def steps_of(path: str) -> list[tuple[int, int]]:
    """Each sampled step of the file and its rows' bytes, oldest first (a whole read: the writer's
    thinning, not a reader's path)."""
    sizes: dict[int, int] = {}
    with open(path, "rb") as f:
        for raw in f:
            if raw.endswith(b"\n"):
                row = parse(raw)
                if row is not None:
                    sizes[row["step"]] = sizes.get(row["step"], 0) + len(raw)
    return sorted(sizes.items())


def diff_rows(a: list[Row], b: list[Row]) -> list[tuple[Row, Row]]:
    """Pairs of rows of two steps with the same prompt (the first of each prompt at each step)."""
    first_b: dict[str, Row] = {}
    for r in b:
        first_b.setdefault(str(r.get("prompt")), r)
    seen: set[str] = set()
    pairs: list[tuple[Row, Row]] = []
    for r in a:
        p = str(r.get("prompt"))
        if p in first_b and p not in seen:
            seen.add(p)
            pairs.append((r, first_b[p]))
    return pairs


def newest(path: str) -> Row | None:
    """The file's last row (the dashboard's one line), or None."""
    for row in rows_backward(path):
        return row
    return None


def answer(run_id: str, run_dir: str, req: Row) -> Row:
    """The ``samples`` verb's answer for a run directory (the agent's, and a pulled copy's on the
    laptop): ``select``'s answer, or with ``diff: [A, B]`` ``{"pairs": [[row at A, row at B], ...],
    "diff": [A, B], "size"}``; both with ``run_id`` and the run's ``alarms`` (alarms.json)."""
    from pippa_contract.alarms import read_alarms
    from pippa_contract.rundir import ALARMS_JSON

    path = os.path.join(run_dir, SAMPLES)
    n = max(1, int(req.get("n") or 8))
    kind = req.get("kind")
    diff = req.get("diff")
    if diff:
        a = select(path, step=int(diff[0]), n=10_000, kind=kind)
        b = select(path, step=int(diff[1]), n=10_000, kind=kind)
        out: Row = {
            "pairs": [list(p) for p in diff_rows(a["rows"], b["rows"])[:n]],
            "diff": [int(diff[0]), int(diff[1])],
            "size": a["size"],
        }
    else:
        step = req.get("step")
        out = select(
            path,
            step=None if step is None else int(step),
            n=n,
            best=bool(req.get("best")),
            worst=bool(req.get("worst")),
            grep=req.get("grep") or None,
            kind=kind,
        )
    out["run_id"] = run_id
    out["alarms"] = read_alarms(os.path.join(run_dir, ALARMS_JSON))
    return out
