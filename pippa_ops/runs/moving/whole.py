"""Steps that must finish whole once begun (a move: copied and resumed, or not moved at all).

``run_whole`` runs a function in a forked child in a session of its own, its stdio on /dev/null: a
``kill -9`` of the command, a closed terminal or a warm client that dies (pippa_ops.instant) leaves it
to finish; this process waits for its answer (the value, or the error it raised) and returns or raises
it as its own. Ctrl-C here is passed on to it. ``stops_held`` is the part that no stop may cut: SIGINT,
SIGTERM and SIGHUP are ignored in it (the copy has landed; the run must be resumed)."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from pippa_ops.errors import PippaError

T = TypeVar("T")
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP ignored until the block ends (then as they were); in the main thread
    only (Python's rule for signal handlers: another thread's caller has its own way to stop)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_whole(fn: Callable[[], T]) -> T:
    """``fn()`` in a child that outlives this process; its value, or the error it raised."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is the parent's answer
        os.close(r)
        _child(fn, w)
    os.close(w)
    data = bytearray()
    with os.fdopen(r, "rb") as f:
        while True:
            try:
                chunk = f.read(1 << 16)
            except KeyboardInterrupt:  # Ctrl-C: the child decides (a copy stops; a landed one finishes)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGINT)
                continue
            if not chunk:
                break
            data += chunk
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    if not data:
        raise PippaError("the move's process ended without an answer")
    ok, value = pickle.loads(bytes(data))  # our own child's answer, over our own pipe
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _child(fn: Callable[[], object], w: int) -> None:
    code = 0
    try:
        os.setsid()  # no terminal's hangup or Ctrl-C reaches it; the parent passes Ctrl-C on
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            answer: tuple[bool, object] = (True, fn())
        except BaseException as e:
            answer = (False, e)
        try:
            data = pickle.dumps(answer)
        except Exception:
            data = pickle.dumps((False, PippaError(f"{type(answer[1]).__name__}: {answer[1]}")))
        with contextlib.suppress(OSError), os.fdopen(w, "wb") as f:
            f.write(data)  # a parent killed meanwhile reads nothing: the move finished anyway
    except BaseException:
        code = 1
    finally:
        os._exit(code)
