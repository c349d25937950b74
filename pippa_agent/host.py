"""What every verb uses on the host: paths, tools on the search path, subprocesses without a shell,
atomic writes, tmux, the answer stream, and the run directory's state files.

Start-up time counts: modules only some verbs need (subprocess, shutil, tempfile, threading) are
imported where used."""

from __future__ import annotations

import json
import os
import sys

from pippa_contract import rundir as rd
from pippa_contract.errors import AgentError as AgentError
from pippa_contract.errors import ErrorKind as ErrorKind
from pippa_contract.rundir import RUN_STATE_FILES
from pippa_contract.rundir import runs_dir as _runs_dir
from pippa_contract.runfacts import ERROR_LINE
from pippa_contract.sessions import LIST_FORMAT as LIST_FORMAT

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing subprocess costs every request ~10 ms, typing ~5 ms
    import subprocess
    from typing import Any, Dict

    Req = Dict[str, Any]
    Answer = Dict[str, Any]
# Non-interactive ssh commands do not read ~/.profile: uv's usual homes are added for lookups.
EXTRA_PATH = ("~/.local/bin", "~/.cargo/bin")


def host_path(path: str) -> str:
    """``~`` and ``~/x`` made absolute; anything else must already be absolute."""
    if "\0" in path or "\n" in path:
        raise AgentError(ErrorKind.USAGE, f"invalid path {path!r}")
    if path == "~" or path.startswith("~/"):
        return os.path.expanduser(path)
    if not path.startswith("/"):
        raise AgentError(ErrorKind.USAGE, f"path must be absolute or start with ~/: {path!r}")
    return path


def search_path() -> str:
    extra = [os.path.expanduser(p) for p in EXTRA_PATH]
    return os.pathsep.join([*extra, os.environ.get("PATH", "/usr/bin:/bin")])


def which(tool: str) -> str | None:
    """``shutil.which`` on the search path, without importing shutil."""
    for d in search_path().split(os.pathsep):
        path = os.path.join(d, tool)
        if d and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run(
    argv: list[str],
    timeout: float = 60,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run an argument list (no shell); a missing tool reads as exit status 127."""
    import subprocess

    try:
        return subprocess.run(
            argv,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "PATH": search_path(), **(env or {})},
            cwd=cwd,
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, b"", (argv[0] + ": not found").encode())
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, b"", (argv[0] + ": timed out").encode())


def text(p: subprocess.CompletedProcess[bytes]) -> str:
    return p.stdout.decode(errors="replace").strip()


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """tmp + rename, so a reader sees the old file or the new one. The tmp file is new (O_EXCL), so
    ``mode`` holds from its first byte even where a stale one was left."""
    tmp = f"{path}.tmp-{os.getpid()}"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def tmux(*args: str) -> subprocess.CompletedProcess[bytes]:
    return run(["tmux", *args], timeout=30)


def last_line(p: subprocess.CompletedProcess[bytes]) -> str:
    """The line that says why a step failed: the last error-looking line, else the last one."""
    lines = [ln.strip() for ln in (p.stderr + p.stdout).decode(errors="replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.lower().startswith(("hint:", "note:"))] or lines
    for line in reversed(lines):
        if ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else f"exit status {p.returncode}"


def write_out(data: bytes) -> None:
    out = sys.stdout.buffer
    out.write(data)
    out.flush()


def write_frame(data: bytes) -> None:
    out = sys.stdout.buffer
    out.write(b"%d\n" % len(data))
    out.write(data)
    out.flush()


def runs_dir(remote_dir: str) -> str:
    return _runs_dir(host_path(remote_dir))


def write_sync_marker(remote_dir: str, marker: Answer) -> None:
    pippa = os.path.join(host_path(remote_dir), ".pippa")
    os.makedirs(pippa, exist_ok=True)
    write_atomic(os.path.join(pippa, "sync.json"), (json.dumps(marker) + "\n").encode())


def ran_for(d: str) -> float:
    """Seconds the run's last stretch ran: ``started`` until ``exit_code`` was written (or, for a run
    that was lost, its log's last write). A resume adds it to run.json's ``past_s``, so the run's
    duration and cost count every stretch (``pippa ps``, alerts)."""
    try:
        with open(os.path.join(d, rd.STARTED), "rb") as f:
            start = float(f.read(32).decode().strip())
    except (OSError, ValueError):
        return 0.0
    for name in (rd.EXIT_CODE, rd.OUTPUT_LOG):
        try:
            return max(0.0, os.stat(os.path.join(d, name)).st_mtime - start)
        except OSError:
            continue
    return 0.0


def reopen_run_dir(d: str, session: str, stamp: float) -> None:
    """Keep the run directory of a run that resumes: clear its state files, and record in run.json
    the session it now runs in and when it resumed (its command and recipe stay as launched)."""
    try:
        with open(os.path.join(d, rd.RUN_JSON), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        raise AgentError(ErrorKind.NOT_FOUND, f"no run to resume at {d}") from None
    meta["past_s"] = float(meta.get("past_s") or 0.0) + ran_for(d)
    if "first_started" not in meta:  # when its first stretch began (host clock): ps's STARTED
        from pippa_contract.runpick import num

        try:
            with open(os.path.join(d, rd.STARTED), "rb") as f:
                first = num(f.read(32).decode(errors="replace"))
        except OSError:
            first = None
        if first is not None:
            meta["first_started"] = first
    for name in RUN_STATE_FILES:
        if os.path.lexists(os.path.join(d, name)):
            os.unlink(os.path.join(d, name))
    meta["session"] = session
    meta["resumed"] = [*meta.get("resumed", []), stamp]
    write_atomic(os.path.join(d, rd.RUN_JSON), (json.dumps(meta) + "\n").encode())
