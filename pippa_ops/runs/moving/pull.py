"""``pippa pull``: a run's record from its host into ``runs/<host>/<run-id>/`` here, incrementally.

One request to the host agent (``pippa_agent.pull``) per run: the laptop says what it already has (each
file's size and the digest of its last 4 KiB), the agent answers with a manifest and streams only
the missing bytes: a grown log or metrics file from where the laptop's copy ends, a new or replaced
file whole, a checkpoint only when asked. Each file is written under a temporary name in its own
directory and renamed into place once complete, so neither a reader nor a pull cut off by a
dropped connection ever leaves a partial file under a real name.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pippa_contract import verbs
from pippa_contract.rundir import RunDir
from pippa_contract.runfacts import tail_digest
from pippa_contract.secrets import SECRETS_PATH
from pippa_ops.errors import HostUnreachable, RemoteCommandFailed, UsageError
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Process, Transport
from pippa_ops.transport.shell import validate_name

PART = ".pippa-part-"  # temporary files of a pull in progress; a later pull removes leftovers
Progress = Callable[[int, int], None]  # (bytes received, bytes to receive)
MAX_FRAME = 16 << 20  # bytes one frame may announce; the agent sends 1 MiB (pippa_agent.pull.PULL_CHUNK)
MAX_MANIFEST = 64 << 20  # bytes of the manifest line (a run of some 100,000 files)
DEFAULT_MAX_BYTES = 100 << 30  # a pull's total unless --max-bytes: a 7B model's checkpoint fits
COPY = 1 << 20  # bytes read from the stream at a time


@dataclass(frozen=True)
class PullResult:
    host: str
    run_id: str
    path: Path
    new: tuple[str, ...]  # files the laptop did not have (or had a different version of)
    grown: tuple[str, ...]  # files that had grown: only their new bytes came
    unchanged: int
    received: int  # bytes
    checkpoints: tuple[str, ...]  # every checkpoint the host has
    checkpoint: str | None  # the one pulled
    changed: tuple[str, ...]  # replaced on the host while being pulled: left as they were here

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"], out["bytes"] = str(self.path), out.pop("received")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def local_dir(root: Path, host: str, run_id: str) -> Path:
    """Where a pulled run lives: ``<root>/<host>/<run-id>`` (host names never hold a slash)."""
    return root / host.replace("/", "_") / validate_name("run", run_id)


def _have(dest: Path) -> dict[str, list[Any]]:
    """What the laptop has of the run: rel -> [size, digest of its last bytes]; stale parts removed."""
    have: dict[str, list[Any]] = {}
    if not dest.is_dir():
        return have
    for path in dest.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        if path.name.startswith(PART):
            path.unlink(missing_ok=True)  # left by a pull that was killed
            continue
        size = path.stat().st_size
        digest = tail_digest(str(path), size)
        if digest is not None:
            have[path.relative_to(dest).as_posix()] = [size, digest]
    return have


def _safe_rel(rel: object) -> str:
    """A manifest path the host sent: relative, no '..', so nothing lands outside the run's dir."""
    if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/"):
        raise RemoteCommandFailed(f"pull: the host sent an unsafe path {rel!r}")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise RemoteCommandFailed(f"pull: the host sent an unsafe path {rel!r}")
    return rel


def _frame_to(proc: Process, out: BinaryIO, room: int, rel: str) -> int:
    """Copy one frame (``<n>\\n`` then n bytes) to ``out`` as it comes, never more than ``room``
    bytes (what the manifest announced for this file, still unsent) nor a frame over MAX_FRAME: the
    host's word on a length never sizes this process's memory or disk. Its length; 0 ends a file."""
    try:
        head = proc.readline(limit=32)
    except ValueError:
        raise RemoteCommandFailed(f"pull: the host sent a frame header over 32 bytes for {rel}") from None
    if not head.endswith(b"\n") or not head[:-1].isdigit():
        raise HostUnreachable("the stream ended early")
    n = int(head)
    if n > MAX_FRAME:
        raise RemoteCommandFailed(
            f"pull: the host announced a frame of {n} bytes for {rel} (at most {MAX_FRAME}): refused"
        )
    if n > room:
        raise RemoteCommandFailed(f"pull: the host sent more of {rel} than its manifest announced: refused")
    left = n
    while left:
        chunk = proc.read(min(left, COPY))
        if not chunk:
            raise HostUnreachable("the stream ended early")
        out.write(chunk)
        left -= len(chunk)
    return n


def _check_manifest(manifest: dict[str, Any], max_bytes: int) -> int:
    """The bytes the manifest announces, checked: each file's part adds up to its ``send``, and the
    total fits ``max_bytes``."""
    try:
        parts = [int(size) - int(offset) for _rel, size, offset, _mtime in manifest["files"]]
        total = int(manifest.get("send", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise RemoteCommandFailed(f"pull: the host sent a malformed manifest ({e})") from None
    if sum(max(p, 0) for p in parts) != total:
        raise RemoteCommandFailed(
            f"pull: the host's manifest announces {total} bytes but lists "
            f"{sum(max(p, 0) for p in parts)}: refused"
        )
    if total > max_bytes:
        raise RemoteCommandFailed(
            f"pull: {total} bytes to pull, over the cap of {max_bytes} (--max-bytes raises it)"
        )
    return total


@dataclass
class _Tally:
    new: list[str] = field(default_factory=list)
    grown: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    received: int = 0


def _receive(
    proc: Process,
    manifest: dict[str, Any],
    dest: Path,
    progress: Progress | None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> _Tally:
    """Write each sent file beside its place, as its frames come, and rename it there once whole."""
    tally = _Tally()
    total = _check_manifest(manifest, max_bytes)
    if progress:
        progress(0, total)
    for rel, size, offset, mtime in manifest["files"]:
        rel = _safe_rel(rel)
        if offset >= size:
            tally.unchanged += 1
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f"{PART}{target.name}-{os.getpid()}")
        try:
            if offset:
                shutil.copyfile(target, part)  # the copy's prefix; the new bytes are appended
            got = offset
            with open(part, "ab" if offset else "wb") as out:
                while n := _frame_to(proc, out, size - got, rel):
                    got += n
                    tally.received += n
                    if progress:
                        progress(tally.received, total)
            if got != size:
                tally.changed.append(rel)  # replaced on the host meanwhile (a resume): keep ours
                continue
            os.utime(part, (mtime, mtime))
            os.replace(part, target)
            (tally.grown if offset else tally.new).append(rel)
        finally:
            part.unlink(missing_ok=True)
    return tally


def pull_run(
    transport: Transport,
    spec: HostSpec,
    run_id: str,
    root: Path,
    *,
    checkpoint: str | None = None,
    progress: Progress | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> PullResult:
    """Bring ``run_id`` from ``spec`` into ``local_dir(root, ...)``; ``checkpoint``: None (no
    checkpoint), ``latest`` or a ``checkpoint-N``/``N`` name; ``max_bytes``: the most this pull
    may bring (a manifest announcing more is refused before anything is written)."""
    remote = RunDir(spec.remote_dir, validate_name("run", run_id)).path
    if spec.is_local:
        raise UsageError(f"run {run_id} is on this machine already: {remote}")
    dest = local_dir(root, spec.name, run_id)
    with verbs.pull(agent_client.Once(transport), remote, _have(dest), checkpoint) as proc:
        proc.close_stdin()
        try:
            try:
                line = proc.readline(limit=MAX_MANIFEST)
            except ValueError:
                raise RemoteCommandFailed(f"pull: the host's manifest is over {MAX_MANIFEST} bytes") from None
            if not line.endswith(b"\n"):
                agent_client.check_stream(transport, "pull", proc, proc.wait(30))
                raise HostUnreachable("no answer")
            manifest = agent_client.parse_answer(transport, "pull", line)
            tally = _receive(proc, manifest, dest, progress, max_bytes)
        except HostUnreachable as e:
            raise HostUnreachable(f"{transport.name}: connection dropped while pulling {run_id} ({e})") from e
        agent_client.check_stream(transport, "pull", proc, proc.wait(30))
    return PullResult(
        host=spec.name,
        run_id=run_id,
        path=dest,
        new=tuple(tally.new),
        grown=tuple(tally.grown),
        unchanged=tally.unchanged,
        received=tally.received,
        checkpoints=tuple(manifest.get("checkpoints") or ()),
        checkpoint=manifest.get("chosen"),
        changed=tuple(tally.changed),
    )


def pull_from_dir(
    source: Path, name: str, root: Path, run_ids: list[str], *, checkpoint: str | None = None
) -> list[PullResult]:
    """Runs from a plain directory (a bucket's copy of an exported task's ``$PIPPA_RUNS``, another
    machine's ``remote_dir``): ``SOURCE/runs/<run-id>/`` (or SOURCE is that ``runs``) into
    ``root/<name>/<run-id>/``, by the same pull as from a host (the agent on this machine reads SOURCE),
    so ``pippa runs --pulled``, ``why --pulled``, ``samples`` and ``compare`` read them as pulled runs.
    No ``run_ids``: every run there."""
    from pippa_contract.names import NAME_RE
    from pippa_contract.rundir import RUNS
    from pippa_ops.transport.base import LocalTransport

    validate_name("name", name)
    base = source if (source / RUNS).is_dir() else source.parent if source.name == RUNS else None
    if base is None or not source.is_dir():
        raise UsageError(f"--from {source}: no {RUNS}/ directory of run directories there")
    if name == "local":
        raise UsageError("--as local: the name of this machine's own runs; pick another")
    found = sorted(d.name for d in (base / RUNS).iterdir() if d.is_dir() and NAME_RE.fullmatch(d.name))
    missing = [r for r in run_ids if r not in found]
    if missing:
        raise UsageError(f"--from {source}: no run {missing[0]} there")
    spec = HostSpec(name=name, remote_dir=str(base.resolve()), source="local")
    transport = LocalTransport(name)
    with transport:
        return [pull_run(transport, spec, r, root, checkpoint=checkpoint) for r in (run_ids or found)]


def wandb_sync(transport: Transport, spec: HostSpec, run_id: str, timeout_s: float = 600) -> list[str]:
    """Upload the run's offline W&B runs from the host (``wandb sync`` there); their names."""
    remote_dir = spec.remote_dir.rstrip("/")
    python = shlex.split(spec.python) if spec.python else [f"{remote_dir}/.venv/bin/python"]
    run_dir = RunDir(remote_dir, validate_name("run", run_id)).path
    answer = verbs.wandb_sync(
        agent_client.Once(transport), run_dir, remote_dir, python, SECRETS_PATH, dict(spec.env), timeout_s
    )
    if answer.get("status") != 0:
        raise RemoteCommandFailed(f"{spec.name}: wandb sync of {run_id} failed: {answer.get('why')}")
    return [str(n) for n in answer.get("synced", [])]
