"""``pippa resume RUN --on HOST``: move an ended run to another host and continue it there, same run id.

The run's directory (run.json, metrics, log, attempts, forensics, and of ``checkpoints/`` only the
newest) streams from the old host's agent (``pull``) through the laptop into the new host's agent
(``receive_run``), file by file, each with the sha256 the laptop computed as it passed; the new host
stages it and renames it into place only when all of it arrived whole. run.json then names the new host
and its own command line (its python, its ``remote_dir``), the old host's directory gets ``moved_to``
(``ps`` there says ``moved to HOST``), and the run resumes on the new host with ``--resume``. From the
end of the stream on (the new host's point of no return) to the resume, no stop cuts it (``whole``).
When the old host cannot be reached, the run moves from the copy ``pippa pull RUN --checkpoints`` left
on the laptop (``runs/<host>/<run-id>/``).
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pippa_contract import rundir as rd
from pippa_contract import verbs
from pippa_ops.errors import (
    HostUnreachable,
    NotResumable,
    RunLivesElsewhere,
    RunNotFound,
    RunStillActive,
    UnknownHost,
    UsageError,
)
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.launch import LaunchResult, resume
from pippa_ops.runs.launching.script import recipe_job
from pippa_ops.runs.moving.locate import all_hosts, locate
from pippa_ops.runs.moving.pull import PART
from pippa_ops.runs.moving.whole import stops_held
from pippa_ops.runs.records.listing import RunRecord, list_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Process, Transport, read_to_end
from pippa_ops.transport.shell import validate_name

if TYPE_CHECKING:
    from pippa_contract.messages import ReceiveRunRequest

CHUNK = 1 << 20
SKIP = (rd.MOVED_TO,)  # the old host's own record of a move never travels


@dataclass(frozen=True)
class MoveResult:
    run_id: str
    from_host: str
    to_host: str
    source: str  # "host" (streamed from the old host) or the laptop copy's path
    files: int
    bytes: int
    elapsed_s: float
    launch: LaunchResult


def _frame(proc: Process) -> bytes:
    """One frame of the old host's pull stream (``<n>\n`` + n bytes; empty at a file's end)."""
    head = proc.readline()
    if not head.endswith(b"\n") or not head[:-1].isdigit() or int(head) > CHUNK * 16:
        raise HostUnreachable("the copy broke off: the old host's stream ended early")
    n, data = int(head), bytearray()
    while len(data) < n:
        chunk = proc.read(n - len(data))
        if not chunk:
            raise HostUnreachable("the copy broke off: the old host's stream ended early")
        data += chunk
    return bytes(data)


def moved_command(command: str, recipe: str, run_id: str, spec: HostSpec) -> str:
    """The run's trainer line for the new host: its python and run directory, the same ``--set``s."""
    words = shlex.split(command)
    if "--run-dir" not in words:
        raise NotResumable(f"run {run_id}: its command has no --run-dir; it cannot move")
    tail = words[words.index("--run-dir") + 2 :]
    sets = []
    for i, w in enumerate(tail):
        if w == "--set" and i + 1 < len(tail) and "=" in tail[i + 1]:
            key, value = tail[i + 1].split("=", 1)
            sets.append((key, value))
    return recipe_job(run_id, recipe, spec.python, spec.remote_dir, sets).command


def _copy_dir(runs_root: Path, run_id: str) -> Path | None:
    """The laptop's pulled copy of ``run_id`` (``runs/<host>/<run-id>/``), when there is one."""
    found = sorted(p.parent for p in runs_root.glob(f"*/{run_id}/{rd.RUN_JSON}"))
    return found[0] if found else None


def _copy_files(root: Path) -> list[list[Any]]:
    """A pulled copy's files as ``[rel, size, mtime]``: of ``checkpoints/`` only the newest."""

    def step(p: Path) -> int:
        tail = p.name.split("-", 1)[1]
        return int(tail) if tail.isdigit() else -1

    ck = sorted((p for p in (root / rd.CHECKPOINTS).glob("checkpoint-*") if p.is_dir()), key=step)
    keep = ck[-1] if ck else None
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name.startswith(PART):
            continue
        rel = path.relative_to(root).as_posix()
        if rel.startswith(rd.CHECKPOINTS + "/") and (keep is None or not path.is_relative_to(keep)):
            continue
        if rel in SKIP or rel.endswith(".tmp"):
            continue
        st = path.stat()
        out.append([rel, st.st_size, st.st_mtime])
    return out


def _chunks_of_file(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(CHUNK):
            yield data


def _send(dest: Process, files: list[list[Any]], chunks: Any) -> int:
    """Each file's bytes as frames, ``0\\n``, then its sha256 line; the bytes sent."""
    total = 0
    for rel, size, _ in files:
        digest, got = hashlib.sha256(), 0
        for data in chunks(rel):
            digest.update(data)
            dest.write(b"%d\n" % len(data) + data)
            got += len(data)
        if got != size:
            raise HostUnreachable(f"the copy broke off: {rel} came with {got} of {size} bytes")
        dest.write(b"0\n" + digest.hexdigest().encode() + b"\n")
        total += got
    return total


def _receive_into(
    transport: Transport,
    spec: HostSpec,
    run_id: str,
    files: list[list[Any]],
    meta: dict[str, Any],
    chunks: Any,
    landing: contextlib.ExitStack[bool | None] | None = None,
) -> int:
    """Stream ``files`` into the new host's ``receive_run``; the bytes sent. Any failure on the way
    closes the stream short, so the new host drops its stage; once the whole stream went, ``landing``
    holds the stops off (the copy lands: the run must be resumed)."""
    request: ReceiveRunRequest = {
        "remote_dir": spec.remote_dir,
        "run_id": run_id,
        "files": files,
        "meta": meta,
    }
    with verbs.receive_run(agent_client.Once(transport), request) as proc:
        try:
            sent = _send(proc, files, chunks)
        except BaseException:
            proc.close_stdin()
            read_to_end(proc)
            proc.wait(30)
            raise
        if landing is not None:
            landing.enter_context(stops_held())
        proc.close_stdin()
        out = read_to_end(proc)
        agent_client.check_stream(transport, "receive_run", proc, proc.wait(600))
        agent_client.parse_answer(transport, "receive_run", out)
    return sent


def _from_host(
    rec: RunRecord,
    transport: Transport,
    old: HostSpec,
    dest: tuple[HostSpec, Transport],
    meta: dict[str, Any],
    landing: contextlib.ExitStack[bool | None],
) -> tuple[int, int]:
    """Stream the run from its old host through here into the new one; (files, bytes)."""
    remote = rd.RunDir(old.remote_dir, rec.run_id).path
    with verbs.pull(agent_client.Once(transport), remote, {}, "latest") as src:
        src.close_stdin()
        line = src.readline()
        if not line.endswith(b"\n"):
            agent_client.check_stream(transport, "pull", src, src.wait(30))
            raise HostUnreachable(f"{old.name}: no answer")
        manifest = agent_client.parse_answer(transport, "pull", line)
        plan = [f for f in manifest["files"]]
        files = [[rel, size, mtime] for rel, size, _, mtime in plan if rel not in SKIP]

        def chunks(rel: str) -> Iterator[bytes]:
            # the pull stream sends each file with bytes, in manifest order, as frames ending in an empty
            # one (an empty file sends nothing): drain the ones that stay, then pass this one on
            while plan:
                name, size = plan[0][0], plan[0][1]
                plan.pop(0)
                if name == rel:
                    break
                while size and _frame(src):
                    pass
            while size and (data := _frame(src)):
                yield data

        sent = _receive_into(dest[1], dest[0], rec.run_id, files, meta, chunks, landing)
    return len(files), sent


def move_run(
    name: str, to_host: str, *, host: str | None, runs_root: Path, extra: dict[str, Any] | None = None
) -> MoveResult:
    """Move ended run ``name`` to ``to_host`` and resume it there (see the module's docstring);
    ``extra``: more run.json keys for the new host (``failover``)."""
    validate_name("run or session", name)
    if to_host not in all_hosts():
        raise UnknownHost(f"unknown host {to_host!r} for --on (see `pippa hosts`)")
    t0 = time.monotonic()
    rec: RunRecord | None = None
    try:
        rec = locate([name], host)[name]
    except (RunNotFound, HostUnreachable) as e:
        copy = _copy_dir(runs_root, name)
        if copy is None:
            raise type(e)(
                f"{e}; no pulled copy of {name} here either (pippa pull {name} --checkpoints)"
            ) from e
    spec2, tr2 = connect(to_host)
    with tr2, contextlib.ExitStack() as landing:
        if rec is not None:
            if rec.host == to_host:
                raise UsageError(f"run {rec.run_id} is on {to_host} already: use pippa resume {rec.run_id}")
            if rec.active:
                raise RunStillActive(
                    f"{rec.host}: run {rec.run_id} is still {rec.state}; "
                    f"pippa stop {rec.run_id} --host {rec.host} first"
                )
            if rec.recipe is None:
                raise NotResumable(f"run {rec.run_id} ran a command (--cmd): it has no checkpoint to move")
            if rec.moved_to:  # a stale copy: the run goes on where it moved, never from here again
                home = f"pippa resume {rec.run_id} --host {rec.moved_to}"
                where = f"{rec.host}: run {rec.run_id} moved to {rec.moved_to}"
                raise RunLivesElsewhere(f"{where} and lives there ({home}); not moved")
            if any(r.run_id == rec.run_id for r in list_runs(tr2, spec2.remote_dir).runs):
                there = f"pippa ps --host {to_host}"
                raise RunLivesElsewhere(f"{to_host} already has run {rec.run_id}: not moved ({there})")
            meta = {**_meta(rec.command, rec.recipe, rec.run_id, rec.host, spec2), **(extra or {})}
            old, tr1 = connect(rec.host)
            with tr1:
                n, sent = _from_host(rec, tr1, old, (spec2, tr2), meta, landing)
                verbs.write_file(
                    agent_client.Once(tr1),
                    rd.RunDir(old.remote_dir, rec.run_id).path + "/" + rd.MOVED_TO,
                    to_host + "\n",
                )
            run_id, from_host, source = rec.run_id, rec.host, "host"
        else:
            run_id, from_host, n, sent, source = _move_copy(name, runs_root, spec2, tr2, extra or {}, landing)
        launched = resume(spec2, tr2, run_id)
    return MoveResult(run_id, from_host, to_host, source, n, sent, time.monotonic() - t0, launched)


def _meta(command: str, recipe: str, run_id: str, from_host: str, spec: HostSpec) -> dict[str, Any]:
    return {
        "host": spec.name,
        "command": moved_command(command, recipe, run_id, spec),
        "moved_from": {"host": from_host, "time": time.time()},
    }


def _move_copy(
    run_id: str,
    runs_root: Path,
    spec: HostSpec,
    transport: Transport,
    extra: dict[str, Any],
    landing: contextlib.ExitStack[bool | None],
) -> tuple[str, str, int, int, str]:
    """Move the laptop's pulled copy of ``run_id`` (its old host unreachable or gone)."""
    import json

    copy = _copy_dir(runs_root, run_id)
    assert copy is not None
    meta = json.loads((copy / rd.RUN_JSON).read_text())
    recipe = meta.get("recipe")
    if not recipe:
        raise NotResumable(f"run {run_id} ran a command (--cmd): it has no checkpoint to move")
    if not (copy / rd.CHECKPOINTS).is_dir():
        raise NotResumable(f"the copy {copy} has no checkpoint: pippa pull {run_id} --checkpoints first")
    files = _copy_files(copy)
    new = {**_meta(str(meta.get("command") or ""), recipe, run_id, copy.parent.name, spec), **extra}
    sent = _receive_into(
        transport, spec, run_id, files, new, lambda rel: _chunks_of_file(copy / rel), landing
    )
    return run_id, copy.parent.name, len(files), sent, str(copy)
