"""``receive_run``: a run directory arriving from another host (``pippa resume RUN --on HOST``).

The request names the run and its files (``[[rel, size, mtime]]``); what follows on stdin is, for each
file in that order, its bytes as frames (``<n>\\n`` + n bytes) ending in ``0\\n``, then the sha256 of
the whole file as 64 hex digits and a newline (computed by the laptop as the bytes passed through it).
Everything is written into a private stage beside the run's place, ``runs/.pippa-move-<run-id>-<pid>``;
each file's size and sha256 are checked; ``run.json`` gets the request's ``meta`` keys (the new host,
its command line, the move's record); then one rename puts the directory in place. A stream that breaks
off, or a checksum that differs, leaves nothing but the stage, which is removed: the run has no
directory on this host until all of it has arrived.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from pippa_agent.host import AgentError, ErrorKind, host_path, write_atomic
from pippa_contract import rundir as rd
from pippa_contract.names import NAME_RE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import ReceiveRunAnswer, ReceiveRunRequest

CHUNK = 1 << 20


def _read_exact(n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(0, min(CHUNK, n - len(buf)))
        if not chunk:
            raise AgentError(ErrorKind.USAGE, "the copy broke off: the stream ended early")
        buf += chunk
    return bytes(buf)


def _read_line() -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            raise AgentError(ErrorKind.USAGE, "the copy broke off: the stream ended early")
        line += c
        if len(line) > 80:
            raise AgentError(ErrorKind.USAGE, "a malformed stream")
    return line[:-1]


def _safe_rel(rel: object) -> str:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        raise AgentError(ErrorKind.USAGE, f"unsafe path in a move: {rel!r}")
    if any(p in ("", ".", "..") for p in rel.split("/")):
        raise AgentError(ErrorKind.USAGE, f"unsafe path in a move: {rel!r}")
    return rel


def receive_run(req: ReceiveRunRequest) -> ReceiveRunAnswer:
    """Receive a run directory (see the module's docstring); ``{"run_dir", "files", "bytes"}``."""
    run_id = str(req.get("run_id") or "")
    if not NAME_RE.match(run_id):
        raise AgentError(ErrorKind.USAGE, f"invalid run id {run_id!r}")
    base = rd.runs_dir(host_path(req["remote_dir"]))
    final = os.path.join(base, run_id)
    if os.path.lexists(final):
        raise AgentError(ErrorKind.USAGE, f"this host already has a run {run_id} ({final})")
    files = [(_safe_rel(f[0]), int(f[1]), float(f[2])) for f in req.get("files") or []]
    if rd.RUN_JSON not in {f[0] for f in files}:
        raise AgentError(ErrorKind.USAGE, "a move must carry run.json")
    os.makedirs(base, exist_ok=True)
    stage = os.path.join(base, f".pippa-move-{run_id}-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    os.mkdir(stage, 0o755)
    total = 0
    try:
        for rel, size, mtime in files:
            path = os.path.join(stage, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            digest, got = hashlib.sha256(), 0
            with open(path, "wb") as out:
                while True:
                    head = _read_line()
                    if not head.isdigit():
                        raise AgentError(ErrorKind.USAGE, "a malformed stream")
                    n = int(head)
                    if n == 0:
                        break
                    data = _read_exact(n)
                    digest.update(data)
                    out.write(data)
                    got += n
                out.flush()
                os.fsync(out.fileno())
            want = _read_line().decode(errors="replace")
            if got != size or digest.hexdigest() != want:
                same = "matches" if digest.hexdigest() == want else "differs"
                why = f"the copy of {rel} arrived damaged ({got} of {size} bytes, checksum {same})"
                raise AgentError(ErrorKind.USAGE, why)
            os.utime(path, (mtime, mtime))
            total += got
        meta_path = os.path.join(stage, rd.RUN_JSON)
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read())
        if not isinstance(meta, dict) or meta.get("run_id") not in (None, run_id):
            raise AgentError(ErrorKind.USAGE, "run.json does not describe this run")
        meta.update(req.get("meta") or {})
        write_atomic(meta_path, (json.dumps(meta) + "\n").encode())
        os.rename(stage, final)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"run_dir": final, "files": len(files), "bytes": total}
