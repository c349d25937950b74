"""Sync: the host's listing, applying a tar stream of changed files (placed by rename, never
through a host-side symlink), the marker, and single file writes."""

from __future__ import annotations

import os
import stat
import time

from pippa_agent.host import (
    AgentError,
    ErrorKind,
    host_path,
    which,
    write_atomic,
    write_sync_marker,
)
from pippa_contract.runfacts import mtime
from pippa_contract.secrets import SECRETS_PATH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_contract.messages import (
        Empty,
        RemoteDirRequest,
        SyncApplyAnswer,
        SyncApplyRequest,
        SyncListAnswer,
        SyncMarkerRequest,
        WriteFileRequest,
    )

PROTECTED_TOP = (".pippa", "runs", ".venv")
STAGE_MAX_AGE_S = 86400.0


def sync_list(req: RemoteDirRequest) -> SyncListAnswer:
    """Size and whole-second mtime of every file and symlink under remote_dir (protected tops left
    out, symlinks never followed), and whether the host can unpack zstd."""
    root = host_path(req["remote_dir"])
    files: list[list[Any]] = []

    def walk(rel: str) -> None:
        try:
            it = os.scandir(os.path.join(root, rel) if rel else root)
        except OSError:
            return
        with it:
            for e in it:
                name = rel + "/" + e.name if rel else e.name
                if not rel and e.name in PROTECTED_TOP:
                    continue
                try:
                    if e.is_symlink() or e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        files.append([os.fsdecode(name), st.st_size, int(st.st_mtime)])
                    elif e.is_dir(follow_symlinks=False):
                        walk(name)
                except OSError:
                    continue

    walk("")
    return {"zstd": which("zstd") is not None, "files": files}


def safe_rel(name: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise AgentError(ErrorKind.USAGE, f"unsafe path in a sync: {name!r}")
    if parts[0] in PROTECTED_TOP:
        raise AgentError(ErrorKind.USAGE, f"sync never writes {parts[0]}/ on the host")
    return name


class Placer:
    """Moves staged files into remote_dir without ever following a host-side symlink: a directory
    on the way that is a symlink (or a file) is replaced by a real directory first, so a file can
    only land inside remote_dir."""

    def __init__(self, root: str, stage: str) -> None:
        self.root = root
        self.stage = stage
        self.ready: set[str] = set()  # relative directories checked (or made) real

    def real_dir(self, rel: str) -> None:
        if not rel or rel in self.ready:
            return
        self.real_dir(os.path.dirname(rel))
        path = os.path.join(self.root, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
        else:
            if not stat.S_ISDIR(st.st_mode):  # a symlink (to a dir or not) or a file: replace it
                os.unlink(path)
                os.mkdir(path)
        self.ready.add(rel)

    def place(self, rel: str) -> None:
        self.real_dir(os.path.dirname(rel))
        dst = os.path.join(self.root, rel)
        if os.path.isdir(dst) and not os.path.islink(dst):
            import shutil

            shutil.rmtree(dst)  # the repo now has a file where the host had a directory
        os.rename(os.path.join(self.stage, rel), dst)  # replaces a symlink itself, never its target

    def place_top(self, top: str) -> bool:
        """A top-level directory absent on the host moves in whole (a cold sync: one rename)."""
        path = os.path.join(self.root, top)
        if os.path.lexists(path):
            return False
        os.rename(os.path.join(self.stage, top), path)
        self.ready.add(top)
        return True

    def delete(self, rel: str) -> None:
        parent = os.path.dirname(rel)
        while parent:  # never delete through a symlinked directory
            if os.path.islink(os.path.join(self.root, parent)):
                return
            parent = os.path.dirname(parent)
        path = os.path.join(self.root, rel)
        if os.path.lexists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
            os.unlink(path)
            parent = os.path.dirname(rel)
            while parent:  # directories the deletion emptied go too, as with rsync --delete
                try:
                    os.rmdir(os.path.join(self.root, parent))
                except OSError:  # not empty (or gone): the ones above are not empty either
                    break
                parent = os.path.dirname(parent)


def sync_apply(req: SyncApplyRequest) -> SyncApplyAnswer:
    """Unpack the compressed tar that follows the request on stdin into a private stage, then move
    each file into place (rename: atomic, so every file is old or new), delete, write the marker.
    The stage is removed whatever happens."""
    import shutil
    import subprocess
    import tempfile

    root = host_path(req["remote_dir"])
    send = [safe_rel(n) for n in req["send"]]
    delete = [safe_rel(n) for n in req["delete"]]
    pippa = os.path.join(root, ".pippa")
    os.makedirs(pippa, exist_ok=True)
    _remove_stale_stages(pippa)
    stage = tempfile.mkdtemp(prefix="stage-", dir=pippa)
    try:
        files = os.path.join(stage, "files")
        os.mkdir(files)
        unpack = ["zstd", "-dcq"] if req.get("zstd") else ["gzip", "-dc"]
        dec = subprocess.Popen(unpack, stdin=0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tar = subprocess.Popen(
            ["tar", "-xpf", "-", "--no-same-owner", "-C", files],
            stdin=dec.stdout,
            stderr=subprocess.PIPE,
        )
        assert dec.stdout is not None
        dec.stdout.close()
        tar_err = tar.communicate()[1]
        dec_err = dec.communicate()[1]
        if dec.returncode != 0 or tar.returncode != 0:
            why = (dec_err + tar_err).decode(errors="replace").strip()
            raise AgentError(
                ErrorKind.SYNC, "unpacking the sync stream failed: " + (why or "truncated stream")
            )
        placer = Placer(root, files)
        whole = set()
        for top in sorted({n.split("/", 1)[0] for n in send if "/" in n}):
            if placer.place_top(top):
                whole.add(top)
        for name in send:
            if name.split("/", 1)[0] not in whole or "/" not in name:
                placer.place(name)
        for name in delete:
            placer.delete(name)
        write_sync_marker(root, req["marker"])
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"sent": len(send), "deleted": len(delete)}


def _remove_stale_stages(pippa: str) -> None:
    import shutil

    now = time.time()
    for name in os.listdir(pippa):
        path = os.path.join(pippa, name)
        if name.startswith("stage-") and now - (mtime(path) or now) > STAGE_MAX_AGE_S:
            shutil.rmtree(path, ignore_errors=True)


def sync_marker(req: SyncMarkerRequest) -> Empty:
    write_sync_marker(req["remote_dir"], req["marker"])
    return {}


def write_file(req: WriteFileRequest) -> Empty:
    """Write ``text`` to ``path`` atomically (e.g. .pippa/setup.json), creating its directory: 0700
    when the file's mode is private (the secrets file), so nobody else can even list it."""
    path = host_path(req["path"])
    mode = int(req.get("mode", 0o644))
    os.makedirs(os.path.dirname(path), mode=0o700 if mode & 0o077 == 0 else 0o777, exist_ok=True)
    if path == host_path(SECRETS_PATH):  # pippa remembers what it pushes: redacted after a rotation too
        from pippa_contract.secretprints import remember, remember_secrets_file
        from pippa_contract.secrets import parse_secrets

        remember_secrets_file()  # what the file held (pushed by an older pippa), then what it will
        remember(parse_secrets(req["text"]))
    write_atomic(path, req["text"].encode(), mode)
    return {}
