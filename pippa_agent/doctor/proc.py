"""Subprocesses the doctor may have to give up on. A hung driver leaves nvidia-smi in uninterruptible
sleep, where even SIGKILL waits: ``host.run`` would then wait for it forever. Here the child runs in
its own process group; at the deadline the group is killed and, if it still holds its pipes, it is
left behind and the check fails with the reason: the doctor itself always answers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from pippa_agent.host import search_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass

TIMED_OUT = 124


def bounded(
    argv: list[str], timeout: float, env: dict[str, str] | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Like ``host.run`` (127 for a missing tool, 124 past ``timeout``), but never blocks past it + 2 s."""
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = search_path() if env is None or "PATH" not in env else env["PATH"]
    try:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as e:
        return subprocess.CompletedProcess(argv, 127, b"", f"{argv[0]}: {e.strerror}".encode())
    try:
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # unkillable (D state) or a grandchild holds the pipes
            out, err = b"", b""
        return subprocess.CompletedProcess(
            argv, TIMED_OUT, out or b"", (err or b"") + b"\n" + f"{argv[0]}: timed out".encode()
        )
