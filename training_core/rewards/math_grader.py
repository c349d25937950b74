"""Mathematical-equivalence grading with a time bound that works on any thread.

math-verify (Hugging Face) bounds its parse and verify with ``signal.alarm``: off the main thread that
raises ValueError, and on the main thread it replaces the process's SIGALRM handler. So it runs here
with its timeouts off, inside worker processes (``training_core.rewards.math_worker``) that are killed
and restarted when one answer takes longer than ``timeout_s`` (sympy can spend minutes on
``9^{9^{9^{9}}}``). A killed answer is graded wrong and counted. Answers longer than ``max_chars``
are graded wrong without parsing. Torch-free; safe to call from several threads at once.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

Verdict = Literal["right", "wrong", "timeout", "too_long"]
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class _Worker:
    """One grading process; ``ask`` returns None when it had to be killed."""

    def __init__(self, startup_timeout_s: float) -> None:
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "training_core.rewards.math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        if _readline(proc.stdout, self.startup_timeout_s) != b"ready\n":
            _kill(proc)
            raise RuntimeError("the math grading process did not start (is math-verify installed?)")
        return proc

    def ask(self, gold: str, pred: str, timeout_s: float) -> bool | None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"gold": gold, "pred": pred}).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:  # it died since the poll (killed from outside, out of memory): like a timeout
            self.close()
            return None
        line = _readline(self.proc.stdout, timeout_s)
        if line is None:
            self.close()
            return None
        return bool(json.loads(line)["ok"])

    def close(self) -> None:
        if self.proc is not None:
            _kill(self.proc)
            self.proc = None


def _readline(stream: IO[bytes], timeout_s: float) -> bytes | None:
    """One line, or None when none arrives in ``timeout_s`` (the worker writes whole lines)."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return None
    return stream.readline() or None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for s in (proc.stdin, proc.stdout):
        if s is not None:
            s.close()


@dataclass
class MathGrader:
    """A small pool of grading processes, started on first use."""

    workers: int = 2  # grading processes; each answer takes ~5 ms, so 2 keep up with a batch of 256
    timeout_s: float = 5.0  # per answer, then the process is killed and the answer graded wrong
    max_chars: int = 512  # longer predicted answers are wrong without parsing
    startup_timeout_s: float = 60.0  # importing sympy on a busy host takes seconds
    timeouts: int = 0  # answers killed so far (for logs and tests)
    _idle: queue.Queue[_Worker] = field(default_factory=queue.Queue, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._all = [_Worker(self.startup_timeout_s) for _ in range(max(1, self.workers))]
        for w in self._all:
            self._idle.put(w)

    def grade(self, gold: str, pred: str) -> Verdict:
        """Whether ``pred`` is mathematically equivalent to ``gold`` (both LaTeX answers, no ``$``)."""
        if len(pred) > self.max_chars:
            return "too_long"
        if not pred.strip() or not gold.strip():
            return "wrong"
        worker = self._idle.get()
        try:
            ok = worker.ask(gold, pred, self.timeout_s)
        finally:
            self._idle.put(worker)
        if ok is None:
            with self._lock:
                self.timeouts += 1
            return "timeout"
        return "right" if ok else "wrong"

    def grade_many(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """``grade`` over (gold, pred) pairs, spread over the worker processes."""
        if len(pairs) <= 1 or len(self._all) == 1:
            return [self.grade(g, p) for g, p in pairs]
        with ThreadPoolExecutor(max_workers=len(self._all)) as ex:
            return list(ex.map(lambda gp: self.grade(*gp), pairs))

    def close(self) -> None:
        for w in self._all:
            w.close()


_DEFAULT: MathGrader | None = None
_DEFAULT_LOCK = threading.Lock()


def default_grader() -> MathGrader:
    """The process-wide grader the rewards and the math eval share (closed at exit)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathGrader()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
