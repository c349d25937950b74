"""Copy the working tree to a host: only changed files, in one stream, never a half-written file.

The file set is what git tracks plus untracked files git does not ignore, minus ``.env`` files and
what ``.pippaignore`` lists (gitignore syntax, applied by git itself). The host is listed in ONE
command (size + mtime of every file), changed files travel as ONE compressed tar stream over one
channel (packed by the local tar and zstd, or gzip when either end lacks zstd, running in parallel
with the sending) into a staging directory under ``<remote_dir>/.pippa/``; a generated script renames each
file into place (rename is atomic, so an interrupted sync leaves every file either old or new; the
stage is removed when the host-side shell exits). ``.pippa/``, ``runs/`` and ``.venv/`` at the top
of the host's tree are never listed, sent, changed or deleted. Deletions happen only with
``delete=True`` and spare host files that git would ignore (caches, wandb/, ...), like rsync's
excludes. Afterwards the host records ``.pippa/sync.json`` (docs/CONTRACTS.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from pippa_ops.errors import RemoteCommandFailed, UsageError
from pippa_ops.inventory import HostSpec
from pippa_ops.shell import sh_path
from pippa_ops.transport import Transport

PROTECTED_TOP = (".pippa", "runs", ".venv")  # never sent, changed or deleted on the host
IGNORE_FILE = ".pippaignore"
MARKER = ".pippa/sync.json"
_ARG_CHUNK = 64_000  # bytes of quoted paths per generated mv/rm line

Progress = Callable[[int], None]  # called with the bytes sent so far


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


# -- the host side ---------------------------------------------------------------------------------
def remote_dir_expr(remote_dir: str) -> str:
    """``sh_path`` of a remote_dir setting, refusing one that is relative or holds a newline."""
    if "\n" in remote_dir or "\0" in remote_dir:
        raise UsageError(f"invalid remote_dir {remote_dir!r}")
    if not (remote_dir == "~" or remote_dir.startswith(("~/", "/"))):
        raise UsageError(f"remote_dir must be absolute or start with ~/: {remote_dir!r}")
    return sh_path(remote_dir)


def listing_command(dir_expr: str) -> str:
    """``Z <0|1>`` (does the host have zstd), then ``size mtime path`` per file, NUL-separated."""
    prune = " -o ".join(f"-path ./{p}" for p in PROTECTED_TOP)
    return (
        "if command -v zstd >/dev/null 2>&1; then printf 'Z 1\\0'; else printf 'Z 0\\0'; fi; "
        f"cd {dir_expr} 2>/dev/null || exit 0; "
        f"find . \\( {prune} \\) -prune -o \\( -type f -o -type l \\) -printf '%s %T@ %P\\0'"
    )


@dataclass(frozen=True)
class Listing:
    files: dict[str, FileStat]
    zstd: bool  # the host can unpack zstd


def parse_listing(raw: bytes) -> Listing:
    out: dict[str, FileStat] = {}
    zstd = False
    for entry in raw.split(b"\0"):
        if not entry:
            continue
        if entry.startswith(b"Z "):
            zstd = entry == b"Z 1"
            continue
        size, mtime, name = entry.split(b" ", 2)
        out[name.decode(errors="surrogateescape")] = FileStat(int(size), int(float(mtime)))
    return Listing(out, zstd)


def remote_files(transport: Transport, dir_expr: str) -> Listing:
    proc = transport.start(listing_command(dir_expr))
    with proc:
        proc.close_stdin()
        chunks = []
        while chunk := proc.read():
            chunks.append(chunk)
        if proc.wait(60) != 0:
            raise RemoteCommandFailed(
                f"{transport.name}: listing the remote dir failed: {proc.stderr_text()}"
            )
    return parse_listing(b"".join(chunks))


def plan(local: dict[str, FileStat], remote: dict[str, FileStat], deletable: set[str] | None) -> Plan:
    """Changed files (size or whole-second mtime differ) and, with ``deletable``, files to remove."""
    p = Plan(send=sorted(n for n, st in local.items() if remote.get(n) != st))
    if deletable is not None:
        p.delete = sorted(deletable)
    return p


def _chunked(words: list[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    size = 0
    for w in words:
        if batch and size + len(w) > _ARG_CHUNK:
            yield batch
            batch, size = [], 0
        batch.append(w)
        size += len(w) + 1
    if batch:
        yield batch


def fresh_tops(send: Iterable[str], remote: Iterable[str]) -> set[str]:
    """Top-level directories of ``send`` under which the host listed no file: a cold sync's whole tree."""
    taken = {n.split("/", 1)[0] for n in remote}
    return {n.split("/", 1)[0] for n in send if "/" in n} - taken


def _move_lines(names: list[str]) -> list[str]:
    """Rename staged files into place, one ``mv`` per directory (and per ~64 KB of names)."""
    lines = []
    by_dir: dict[str, list[str]] = {}
    for name in names:
        by_dir.setdefault(os.path.dirname(name) or ".", []).append(name)
    for d, batch_names in sorted(by_dir.items()):
        if d != ".":
            lines.append(f"mkdir -p -- {shlex.quote(d)}")
        for batch in _chunked([shlex.quote(n) for n in batch_names]):
            lines.append(f'(cd "$S" && exec mv -f -t "$D"/{shlex.quote(d)} -- {" ".join(batch)})')
    return lines


def apply_script(
    send: list[str], delete: list[str], marker: dict[str, object], fresh: set[str] | None = None
) -> str:
    """The host-side script, run as ``sh apply.sh DEST STAGE``: rename staged files into place,
    delete, then write the marker (tmp + rename). Every path is quoted here, once.

    ``fresh`` (see ``fresh_tops``): top-level directories the host had no file under. Each one is
    renamed whole, all of them in one ``mv`` (a cold sync: one process instead of one per directory);
    the stage holds only complete files (apply.sh runs after tar succeeded), so a renamed directory
    is never half-written. One that exists by now (empty, or created since the listing) takes the
    per-file path instead."""
    lines = ["set -e", 'D="$1"', 'S="$2/files"', 'cd "$D"']
    fresh = fresh or set()
    under: dict[str, list[str]] = {}
    rest: list[str] = []
    for name in send:
        top = name.split("/", 1)[0]
        if "/" in name and top in fresh:
            under.setdefault(top, []).append(name)
        else:
            rest.append(name)
    if under:
        lines.append("set --")
        for top, names in sorted(under.items()):
            q = shlex.quote(top)
            fallback = "; ".join(_move_lines(names))
            lines.append(f'if [ -e "$D"/{q} ] || [ -L "$D"/{q} ]; then {fallback}; else set -- "$@" {q}; fi')
        lines.append('[ "$#" -eq 0 ] || (cd "$S" && exec mv -t "$D" -- "$@")')
    lines += _move_lines(rest)
    for batch in _chunked([shlex.quote(n) for n in delete]):
        lines.append(f"rm -f -- {' '.join(batch)}")
    lines += marker_lines(marker)
    return "\n".join(lines) + "\n"


def marker_lines(marker: dict[str, object]) -> list[str]:
    """Shell lines (run in the remote dir) that write .pippa/sync.json atomically."""
    body = shlex.quote(json.dumps(marker))
    return [
        "mkdir -p .pippa",
        f"printf '%s\\n' {body} > .pippa/sync.json.tmp",
        "mv -f .pippa/sync.json.tmp .pippa/sync.json",
    ]


def receive_command(dir_expr: str, stage_id: str, zstd: bool) -> str:
    """Read ``<n>\\n`` + n bytes of apply.sh, then unpack the tar.gz into a private stage and run
    apply.sh; the stage goes when the shell exits, whether it succeeded or not."""
    return (
        f'set -e; D={dir_expr}; mkdir -p "$D/.pippa"; S="$D/.pippa/stage-{stage_id}"; '
        'trap \'rm -rf "$S"\' EXIT; mkdir -p "$S/files"; '
        'find "$D/.pippa" -maxdepth 1 -name "stage-*" -mmin +1440 -exec rm -rf {} + 2>/dev/null || true; '
        'IFS= read -r n; head -c "$n" > "$S/apply.sh"; '
        + ("zstd -dcq | " if zstd else "gzip -dc | ")
        + 'tar -xpf - --no-same-owner -C "$S/files"; sh "$S/apply.sh" "$D" "$S"'
    )


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
    repo: Path,
    send: list[str],
    script: str,
    write: Callable[[bytes], None],
    progress: Progress | None,
    zstd: bool,
) -> int:
    """Header, apply.sh, then the packed files; returns bytes written. ``progress`` may raise."""
    data = script.encode()
    header = f"{len(data)}\n".encode() + data
    write(header)
    sent = len(header)
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
    defer_marker: list[str] | None = None,
) -> SyncResult:
    """Bring ``spec.remote_dir`` on the host up to date with ``repo``; see the module docstring.

    ``defer_marker``: when nothing travels, append the marker's shell command (one subshell) here
    instead of running it, for a caller that runs a command on the host next anyway (``pippa run``
    saves a round trip); the caller must run it."""
    t0 = time.monotonic()
    if transport.is_local:
        commit, dirty = tree_state(repo)  # the repo is the remote dir: only the marker
        files = local_files(repo)
        if not dry_run:
            _write_local_marker(
                repo, {"commit": commit, "dirty": dirty, "time": time.time(), "files": len(files)}
            )
        return SyncResult(
            spec.name, str(repo), len(files), (), (), 0, commit, dirty, dry_run, time.monotonic() - t0, True
        )
    dir_expr = remote_dir_expr(spec.remote_dir)
    remote_box: dict[str, Listing | BaseException] = {}

    def list_remote() -> None:
        try:
            remote_box["v"] = remote_files(transport, dir_expr)
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
    remote = listing.files
    zstd = listing.zstd and shutil.which("zstd") is not None
    deletable = None
    if delete:
        gone = [n for n in remote if n not in local and not _excluded(n)]
        deletable = set(gone) - ignored_by_git(repo, gone)
    todo = plan(local, remote, deletable)
    result = SyncResult(
        spec.name, spec.remote_dir, len(local), tuple(todo.send), tuple(todo.delete), 0, commit, dirty,
        dry_run, 0.0,
    )  # fmt: skip
    if dry_run:
        return _finish(result, 0, t0)
    marker: dict[str, object] = {"commit": commit, "dirty": dirty, "time": time.time(), "files": len(local)}
    if not todo.send and not todo.delete:  # nothing travels: only the marker, in one small command
        marker_cmd = "; ".join(["set -e", f"mkdir -p {dir_expr}", f"cd {dir_expr}", *marker_lines(marker)])
        if defer_marker is not None:
            defer_marker.append(f"( {marker_cmd} )")
        else:
            transport.run(marker_cmd, check=True)
        return _finish(result, 0, t0)
    script = apply_script(todo.send, todo.delete, marker, fresh_tops(todo.send, remote))
    proc = transport.start(receive_command(dir_expr, secrets.token_hex(4), zstd))
    with proc:
        try:
            sent_bytes = _send_stream(repo, todo.send, script, proc.write, progress, zstd)
        except BaseException:
            # End the stream instead of killing: the host's tar sees a truncated archive and fails,
            # apply.sh never runs, and the shell's EXIT trap removes the stage.
            proc.close_stdin()
            with contextlib.suppress(Exception):
                proc.wait(5)
            raise
        proc.close_stdin()
        while proc.read():
            pass
        status = proc.wait(600)
        if status != 0:
            raise RemoteCommandFailed(f"{spec.name}: sync failed on the host: {proc.stderr_text().strip()}")
    return _finish(result, sent_bytes, t0)


def _finish(result: SyncResult, sent_bytes: int, t0: float) -> SyncResult:
    return replace(result, bytes_sent=sent_bytes, elapsed_s=time.monotonic() - t0)


def _write_local_marker(repo: Path, marker: dict[str, object]) -> None:
    path = repo / MARKER
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(marker) + "\n")
    tmp.replace(path)
