"""One cgroup per concurrent sandbox: a memory cap on all its processes together and a process cap.

RLIMIT_AS is per process, so 16 processes of 400 MiB each stay under it; a cgroup's memory limit
counts them all, tmpfs pages (the sandbox's /tmp and /dev/shm) included. cgroup v1 (separate
``memory`` and ``pids`` hierarchies) and v2 (one unified tree) are both handled. Slots are reused:
a run's processes are all dead before its slot is handed on (PID namespace), so only the limits are
rewritten, and counters (OOM kills, refused forks) are read as differences.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pippa_contract import cgroupdeleg

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Counters:
    oom_kills: int
    fork_refusals: int


def _read_key(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    return 0


def remove_tree(*bases: Path, wait_s: float = 0.0) -> None:
    deadline = time.monotonic() + wait_s
    for base in dict.fromkeys(bases):
        while True:
            for d in base.glob("[0-9]*"):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                base.rmdir()
            if not base.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.01)


def _remove_stale(parent: Path) -> None:
    """Parents left by a trainer that was killed (no atexit): their pid is gone."""
    for d in parent.glob("pippa-sandbox-*"):
        pid = d.name.split("-")[2]  # pippa-sandbox-PID-TOKEN
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_tree(d)


class CgroupSlots:
    """Per-run cgroups under one parent created for this process (root's, or a delegated subtree)."""

    def __init__(self, kind: str, mem_base: Path, pids_base: Path) -> None:
        self.kind = kind  # "cgroup v1" | "cgroup v2", + " (delegated)" for an ordinary user's subtree
        self._mem_base, self._pids_base = mem_base, pids_base
        self._free: list[int] = []
        self._next = 0
        self._limits: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, root: Path = ROOT, own: dict[str, str] | None = None, euid: int | None = None
    ) -> CgroupSlots | str:
        """The slots, or one line saying why this process has no writable memory and pids cgroups
        (``cgroupdeleg.plan``: root's own, or an ordinary user's delegated subtree)."""
        where = cgroupdeleg.plan(str(root), own, euid)
        if isinstance(where, str):
            return where
        # one parent per CgroupSlots, not per process: removing one never empties another's slots
        name = f"pippa-sandbox-{os.getpid()}-{secrets.token_hex(3)}"
        mem_parent, pids_parent = Path(where.memory_parent), Path(where.pids_parent)
        kind = where.kind + (" (delegated)" if where.delegated else "")
        try:
            if where.move_self_to is not None:  # v2 delegated: only leaves hold processes
                leaf = Path(where.move_self_to)
                leaf.mkdir(exist_ok=True)
                # every process of the scope (accelerate's launcher, other ranks), this one first: the
                # scope may enable controllers below only once it holds no process itself
                others = (mem_parent / "cgroup.procs").read_text().split()
                for pid in dict.fromkeys([str(os.getpid()), *others]):
                    with contextlib.suppress(ProcessLookupError):
                        (leaf / "cgroup.procs").write_text(pid)
                (mem_parent / "cgroup.subtree_control").write_text("+memory +pids")
            _remove_stale(mem_parent)
            _remove_stale(pids_parent)
            mb, pb = mem_parent / name, pids_parent / name
            mb.mkdir(exist_ok=True)
            pb.mkdir(exist_ok=True)
            if where.kind == "cgroup v2":
                (mb / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as e:
            return f"{where.describe()}: {e.strerror or e} ({getattr(e, 'filename', '') or ''})"
        return cls._registered(cls(kind, mb, pb))

    @staticmethod
    def _registered(slots: CgroupSlots) -> CgroupSlots:
        atexit.register(slots.remove)
        return slots

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the slots and their parents; a dead run's last pid is freed a little after its exit,
        so busy directories are retried for up to ``wait_s``."""
        remove_tree(self._mem_base, self._pids_base, wait_s=wait_s)

    def acquire(self, memory_bytes: int, max_pids: int) -> int:
        with self._lock:  # the first empty slot (oldest first), not a read of every free one
            ready = next((s for s in self._free if self._emptied(s)), None)
            if ready is not None:
                slot = ready
                self._free.remove(slot)
            else:
                slot, self._next = self._next, self._next + 1
        mem, pids = self._mem_base / str(slot), self._pids_base / str(slot)
        if slot not in self._limits:  # made once; a reused slot exists
            mem.mkdir(exist_ok=True)
            pids.mkdir(exist_ok=True)
        if self._limits.get(slot) != (memory_bytes, max_pids):
            if self.kind.startswith("cgroup v1"):
                sw = mem / "memory.memsw.limit_in_bytes"
                # memsw (memory + swap) must stay >= the memory limit: order the writes accordingly
                order = [mem / "memory.limit_in_bytes", sw]
                if sw.exists() and int(sw.read_text()) < memory_bytes:
                    order.reverse()
                for f in order:
                    if f.exists():
                        f.write_text(str(memory_bytes))
            else:
                (mem / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (mem / "memory.swap.max").write_text("0")
            (pids / "pids.max").write_text(str(max_pids))
            self._limits[slot] = (memory_bytes, max_pids)
        return slot

    def release(self, slot: int) -> None:
        with self._lock:
            self._free.append(slot)

    def _emptied(self, slot: int) -> bool:
        """The kernel frees a dead run's last pid a little after its exit: reuse only empty slots."""
        with contextlib.suppress(OSError, ValueError):
            return int((self._pids_base / str(slot) / "pids.current").read_text()) == 0
        return False

    def join(self, slot: int, pid: int) -> None:
        """Move ``pid`` (not yet forked) into the slot's cgroups."""
        for base in {self._mem_base, self._pids_base}:
            (base / str(slot) / "cgroup.procs").write_text(str(pid))

    def procs_files(self, slot: int) -> list[str]:
        """The files a process writes its pid to, to join the slot (``join`` from inside)."""
        bases = dict.fromkeys((self._mem_base, self._pids_base))  # one directory on cgroup v2
        return [str(base / str(slot) / "cgroup.procs") for base in bases]

    def kill_all(self, slot: int, wait_s: float = 10.0) -> None:
        """SIGKILL every process in the slot until it is empty (processes that do not die with their
        launcher: gVisor's sandbox and gofer)."""
        procs = self._pids_base / str(slot) / "cgroup.procs"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                pids = [int(p) for p in procs.read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def counters(self, slot: int) -> Counters:
        mem, pids = self._mem_base / str(slot), self._pids_base / str(slot)
        oom_file = mem / ("memory.oom_control" if self.kind.startswith("cgroup v1") else "memory.events")
        return Counters(_read_key(oom_file, "oom_kill"), _read_key(pids / "pids.events", "max"))
