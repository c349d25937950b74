"""A bounded pool that runs many sandboxed programs at once.

Each run is its own process tree; the pool only bounds how many exist at a time (threads wait on
pipes, so the GIL is not the limit). Reward functions score a whole batch of completions through
``map`` so a slow program does not serialize the batch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from training_core.sandbox.isolation import detect
from training_core.sandbox.launcher import Launcher, SandboxUnavailable
from training_core.sandbox.results import SandboxLimits, SandboxResult
from training_core.sandbox.runner import failed_result, run_python
from training_core.sandbox.usrcopy import UsrCopy


def _run_one(code: str, limits: SandboxLimits, launcher: Launcher, calls: Sequence[str]) -> SandboxResult:
    """One run whose failure to start (file descriptors, a cgroup write) is that run's result alone.

    ``SandboxUnavailable`` still raises: refusing to run unconfined concerns the whole batch."""
    try:
        return run_python(code, limits, launcher, calls)
    except SandboxUnavailable:
        raise
    except Exception as e:
        return failed_result(launcher, f"sandbox error: {type(e).__name__}: {e}")


class SandboxPool:
    """At most ``workers`` sandboxes alive at once (default: the number of CPUs)."""

    def __init__(
        self,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.limits = limits or SandboxLimits()
        self.launcher = launcher or detect()
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox")

    def run(self, code: str, limits: SandboxLimits | None = None) -> SandboxResult:
        return self._executor.submit(run_python, code, limits or self.limits, self.launcher).result()

    def map(
        self,
        codes: Sequence[str],
        limits: SandboxLimits | None = None,
        calls: Sequence[Sequence[str]] | None = None,
    ) -> list[SandboxResult]:
        """Results in the order of ``codes``; ``calls[i]`` are evaluated after program i (``run_python``)."""
        lim = limits or self.limits
        per = calls if calls is not None else [()] * len(codes)
        futures = [
            self._executor.submit(_run_one, c, lim, self.launcher, k) for c, k in zip(codes, per, strict=True)
        ]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: SandboxPool | None = None
_default_lock = threading.Lock()


def resident(launcher: Launcher) -> Launcher:
    """``launcher`` with, as /usr, a memory-resident copy of the interpreter's files and the common tools
    (``usrcopy``: no page cache state one run could leave for another, nothing to time), made now; where
    no copy can be made, ``launcher`` itself, with a note in its header saying why."""
    copy = UsrCopy.create(launcher.python) if launcher.bwrap or launcher.runsc else "no bwrap"
    if isinstance(copy, UsrCopy):
        launcher = replace(launcher, usr=str(copy.root))
        note = "/usr: a memory-resident copy of the interpreter's files and the common tools"
    else:
        note = f"/usr: the host's, shared page cache ({copy})"
    return replace(launcher, isolation=replace(launcher.isolation, notes=(*launcher.isolation.notes, note)))


def default_pool() -> SandboxPool:
    """The process-wide pool every code reward, the MBPP evaluation and the code game share (created on
    first use): its sandboxes see the resident /usr (``resident``)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SandboxPool(launcher=resident(detect()))
        return _default
