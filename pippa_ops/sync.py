"""Copy the working tree to a host: only changed files, in one stream, never a half-written file.

The file set is what git tracks plus untracked files git does not ignore, minus ``.env`` files and
what ``.pippaignore`` lists (gitignore syntax, applied by git itself). The host agent
(``pippa_agent``) lists the host in ONE round trip (size + mtime of every file), changed files
travel as ONE compressed tar stream over one channel (packed by the local tar and zstd, or gzip when
either end lacks zstd, running in parallel with the sending) into a staging directory under
``<remote_dir>/.pippa/``; the agent renames each file into place (rename is atomic, so an interrupted
sync leaves every file either old or new), never following a host-side symlink on the way (a
directory that is a symlink on the host is replaced by a real one), and removes the stage.
``.pippa/``, ``runs/`` and ``.venv/`` at the top
of the host's tree are never listed, sent, changed or deleted. Deletions happen only with
``delete=True`` and spare host files that git would ignore (caches, wandb/, ...), like rsync's
excludes. Afterwards the host records ``.pippa/sync.json`` (docs/CONTRACTS.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pippa_contract import verbs
from pippa_ops.errors import HostUnreachable, RemoteCommandFailed, UsageError
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport, read_to_end
from pippa_ops.transport.shell import sh_path

if TYPE_CHECKING:  # the verbs' message types, for annotations only
    from pippa_contract import messages

PROTECTED_TOP = (".pippa", "runs", ".venv")  # never sent, changed or deleted on the host
IGNORE_FILE = ".pippaignore"
MARKER = ".pippa/sync.json"

Progress = Callable[[int], None]  # called with the bytes sent so far
HANDFUL = 5  # deletions up to this many (and no more than the tree holds) need no confirmation


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: int  # whole seconds: what survives tar on any host


@dataclass(frozen=True)
class SyncResult:
    """What a sync did (or, with dry_run, would do)."""

    host: str
    remote_dir: str
    files: int  # size of the local file set
    sent: tuple[str, ...]
    deleted: tuple[str, ...]
    bytes_sent: int  # on the wire (compressed tar), 0 for a dry run
    commit: str | None
    dirty: bool
    dry_run: bool
    elapsed_s: float
    local: bool = False
    send_size: int = 0  # bytes of the files to send, before compression (a dry run reports it too)

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "remote_dir": self.remote_dir,
            "files": self.files,
            "sent": list(self.sent),
            "deleted": list(self.deleted),
            "bytes_sent": self.bytes_sent,
            "commit": self.commit,
            "dirty": self.dirty,
            "dry_run": self.dry_run,
            "elapsed_s": round(self.elapsed_s, 3),
            "send_size": self.send_size,
        }


@dataclass
class Plan:
    send: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


# -- the local side --------------------------------------------------------------------------------
def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        p = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, timeout=60)
    except OSError as e:
        raise UsageError(f"sync needs git: {e}") from e
    if p.returncode not in (0, 1):
        raise UsageError(f"{repo} is not a usable git checkout: {p.stderr.decode(errors='replace').strip()}")
    return p.stdout


def _excluded(path: str) -> bool:
    return path.split("/", 1)[0] in PROTECTED_TOP or os.path.basename(path) == ".env"


def local_files(repo: Path) -> dict[str, FileStat]:
    """The file set to sync: tracked + untracked-not-ignored, minus .env and .pippaignore patterns."""
    ignore = repo / IGNORE_FILE
    extra = ["-X", str(ignore)] if ignore.is_file() else []
    names = set(_git(repo, "ls-files", "-z", "-co", "--exclude-standard", *extra).split(b"\0"))
    if extra:  # tracked files matching .pippaignore (-X alone only filters untracked ones)
        names -= set(_git(repo, "ls-files", "-z", "-ci", *extra).split(b"\0"))
    out: dict[str, FileStat] = {}
    for raw in names:
        name = raw.decode(errors="surrogateescape")
        if not name or _excluded(name):
            continue
        try:
            st = os.lstat(repo / name)
        except FileNotFoundError:
            continue  # tracked but deleted in the working tree
        if os.path.isdir(repo / name) and not os.path.islink(repo / name):
            continue  # a submodule
        out[name] = FileStat(st.st_size, int(st.st_mtime))
    return out


def tree_state(repo: Path) -> tuple[str | None, bool]:
    """(HEAD commit or None, whether the working tree differs from it, untracked files included)."""
    head = _git(repo, "rev-parse", "--verify", "-q", "HEAD").decode().strip() or None
    dirty = bool(_git(repo, "status", "--porcelain", "-z").strip())
    return head, dirty


def ignored_by_git(repo: Path, paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` (that need not exist here) git or .pippaignore would ignore."""
    paths = list(paths)
    if not paths:
        return set()
    ignore = repo / IGNORE_FILE
    extra = ["-c", f"core.excludesFile={ignore}"] if ignore.is_file() else []
    out = _git(repo, *extra, "check-ignore", "--no-index", "--stdin", "-z", stdin="\0".join(paths).encode())
    return {p.decode(errors="surrogateescape") for p in out.split(b"\0") if p}


# -- the host side (pippa_agent.sync: sync_list / sync_apply) ----------------------------------------
def check_remote_dir(remote_dir: str) -> str:
    """A remote_dir setting, refusing one that is relative or holds a newline."""
    if "\n" in remote_dir or "\0" in remote_dir:
        raise UsageError(f"invalid remote_dir {remote_dir!r}")
    if not (remote_dir == "~" or remote_dir.startswith(("~/", "/"))):
        raise UsageError(f"remote_dir must be absolute or start with ~/: {remote_dir!r}")
    return remote_dir


def remote_dir_expr(remote_dir: str) -> str:
    """A checked remote_dir as one shell word (``~`` left to the host's ``$HOME``)."""
    return sh_path(check_remote_dir(remote_dir))


@dataclass(frozen=True)
class Listing:
    files: dict[str, FileStat]
    zstd: bool  # the host can unpack zstd


def parse_listing(answer: Mapping[str, object]) -> Listing:
    """The agent's ``sync_list`` answer: ``{"zstd": bool, "files": [[name, size, mtime], ...]}``."""
    rows = answer.get("files")
    files = {str(n): FileStat(int(size), int(mt)) for n, size, mt in (rows if isinstance(rows, list) else [])}
    return Listing(files, bool(answer.get("zstd")))


def remote_files(agent: agent_client.Session, remote_dir: str) -> Listing:
    return parse_listing(verbs.sync_list(agent, remote_dir))


def plan(local: dict[str, FileStat], remote: dict[str, FileStat], deletable: set[str] | None) -> Plan:
    """Changed files (size or whole-second mtime differ) and, with ``deletable``, files to remove."""
    p = Plan(send=sorted(n for n, st in local.items() if remote.get(n) != st))
    if deletable is not None:
        p.delete = sorted(deletable)
    return p


def _pack(repo: Path, zstd: bool) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """``tar | zstd -1`` (or ``gzip -1``) as local C processes, names NUL-separated on tar's stdin:
    reading, packing and compressing run in parallel with the SSH sending done here."""
    tar = subprocess.Popen(
        ["tar", "-cf", "-", "-C", str(repo), "--null", "-T", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    compress = ["zstd", "-1", "-q", "-T0"] if zstd else ["gzip", "-1"]
    gz = subprocess.Popen(compress, stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert tar.stdout is not None
    tar.stdout.close()  # gzip owns it now
    return tar, gz


def _send_stream(
    repo: Path, send: list[str], write: Callable[[bytes], None], progress: Progress | None, zstd: bool
) -> int:
    """The packed files; returns bytes written. ``progress`` may raise."""
    sent = 0
    tar, gz = _pack(repo, zstd)
    assert tar.stdin is not None and gz.stdout is not None
    # names as ./x so that none reads as an option
    feeder = threading.Thread(target=_feed_names, args=(tar.stdin, [f"./{n}" for n in send]), daemon=True)
    feeder.start()
    try:
        while chunk := gz.stdout.read1(1 << 17):  # type: ignore[attr-defined]
            write(chunk)
            sent += len(chunk)
            if progress is not None:
                progress(sent)
    except BaseException:
        for p in (gz, tar):
            p.kill()
        raise
    finally:
        errors = []
        for p in (gz, tar):
            p.wait()
            if p.stderr is not None:
                errors.append(p.stderr.read().decode(errors="replace").strip())
                p.stderr.close()
        gz.stdout.close()
        feeder.join()
    if tar.returncode != 0 or gz.returncode != 0:
        raise UsageError(f"packing the files to sync failed: {' '.join(e for e in errors if e)}")
    return sent


def _feed_names(stdin: IO[bytes], names: list[str]) -> None:
    try:
        stdin.write(b"\0".join(n.encode(errors="surrogateescape") for n in names) + b"\0")
        stdin.close()
    except OSError:
        pass  # the packer died; its exit status tells


def sync(
    spec: HostSpec,
    transport: Transport,
    repo: Path,
    *,
    delete: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    defer_marker: list[dict[str, object]] | None = None,
    agent: agent_client.Session | None = None,
    confirm: Callable[[SyncResult], bool] | None = None,
    connected: Callable[[], None] = lambda: None,
) -> SyncResult:
    """Bring ``spec.remote_dir`` on the host up to date with ``repo``; see the module docstring.

    ``defer_marker``: when nothing travels, append the marker (sync.json's content) here instead of
    writing it, for a caller that sends the host a request next anyway (``pippa run`` saves a round
    trip); the caller must have it written. ``agent``: the caller's agent session, to be used again
    after the sync (``pippa run``); by default the sync has one of its own. ``confirm``: asked
    before deleting more than a handful of host files, or more than the tree holds (``many_deletions``);
    False cancels the sync with nothing changed. ``connected``: called once the host answered (its
    listing came back: key verified, logged in), so a "sending" line never precedes a refusal; it costs
    no round trip of its own."""
    if agent is None:
        with agent_client.Session(transport) as own:
            return sync(
                spec,
                transport,
                repo,
                delete=delete,
                dry_run=dry_run,
                progress=progress,
                defer_marker=defer_marker,
                agent=own,
                confirm=confirm,
                connected=connected,
            )
    t0 = time.monotonic()
    if transport.is_local:
        connected()
        commit, dirty = tree_state(repo)  # the repo is the remote dir: only the marker
        files = local_files(repo)
        if not dry_run:
            _write_local_marker(
                repo, {"commit": commit, "dirty": dirty, "time": time.time(), "files": len(files)}
            )
        return SyncResult(
            spec.name, str(repo), len(files), (), (), 0, commit, dirty, dry_run, time.monotonic() - t0, True
        )
    remote_dir = check_remote_dir(spec.remote_dir)
    remote_box: dict[str, Listing | BaseException] = {}

    def list_remote() -> None:
        try:
            remote_box["v"] = remote_files(agent, remote_dir)
        except BaseException as e:  # re-raised in the caller's thread
            remote_box["v"] = e

    lister = threading.Thread(target=list_remote, daemon=True)
    lister.start()  # the SSH handshake and listing overlap with git and stat here
    commit, dirty = tree_state(repo)
    local = local_files(repo)
    lister.join()
    listing = remote_box["v"]
    if isinstance(listing, BaseException):
        raise listing
    connected()
    remote = listing.files
    zstd = listing.zstd and shutil.which("zstd") is not None
    deletable = None
    if delete:
        gone = [n for n in remote if n not in local and not _excluded(n)]
        deletable = set(gone) - ignored_by_git(repo, gone)
    todo = plan(local, remote, deletable)
    result = SyncResult(
        spec.name,
        spec.remote_dir,
        len(local),
        tuple(todo.send),
        tuple(todo.delete),
        0,
        commit,
        dirty,
        dry_run,
        0.0,
        send_size=sum(local[n].size for n in todo.send),
    )
    if dry_run:
        return _finish(result, 0, t0)
    if confirm is not None and many_deletions(result) and not confirm(result):
        raise SyncCancelled(f"{spec.name}: sync cancelled; nothing was sent or deleted")
    marker: dict[str, object] = {"commit": commit, "dirty": dirty, "time": time.time(), "files": len(local)}
    if not todo.send and not todo.delete:  # nothing travels: only the marker, in one small request
        if defer_marker is not None:
            defer_marker.append(marker)
        else:
            verbs.sync_marker(agent, remote_dir, marker)
        return _finish(result, 0, t0)
    request: messages.SyncApplyRequest = {
        "remote_dir": remote_dir,
        "send": todo.send,
        "delete": todo.delete,
        "marker": marker,
        "zstd": zstd,
    }
    with verbs.sync_apply(agent, request) as proc:

        def write(data: bytes) -> None:
            try:
                proc.write(data)
            except OSError as e:  # a dropped connection, a connection keeper that died
                raise HostUnreachable(f"{spec.name}: lost the connection mid-sync ({e}); sync again") from e

        try:
            sent_bytes = _send_stream(repo, todo.send, write, progress, zstd)
        except BaseException:
            # End the stream instead of killing: the host's tar sees a truncated archive and fails,
            # nothing is moved into place, and the agent removes the stage.
            proc.close_stdin()
            with contextlib.suppress(Exception):
                proc.wait(5)
            raise
        proc.close_stdin()
        out = read_to_end(proc)
        status = proc.wait(600)
        if status != 0 and proc.connection_lost():
            raise HostUnreachable(f"{spec.name}: lost the connection mid-sync; sync again")
        if status != 0:
            raise RemoteCommandFailed(f"{spec.name}: sync failed on the host: {proc.stderr_text().strip()}")
        agent_client.parse_answer(transport, "sync", out)
    return _finish(result, sent_bytes, t0)


class SyncCancelled(UsageError):
    """The user declined a sync's deletions."""


def many_deletions(result: SyncResult) -> bool:
    """Whether a sync deletes more than a handful of host files, or more than the tree it sends holds
    (the mark of the wrong tree). One file removed here and mirrored there asks nothing."""
    return len(result.deleted) > min(HANDFUL, result.files)


def _finish(result: SyncResult, sent_bytes: int, t0: float) -> SyncResult:
    return replace(result, bytes_sent=sent_bytes, elapsed_s=time.monotonic() - t0)


def _write_local_marker(repo: Path, marker: dict[str, object]) -> None:
    path = repo / MARKER
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(marker) + "\n")
    tmp.replace(path)
