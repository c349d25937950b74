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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Counters:
    oom_kills: int
    fork_refusals: int


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in ``controller``'s v1 hierarchy, or in the v2 tree (``""``)."""
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(",") or (controller == "" and ctrls == ""):
                return path
    return None


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
    """Per-run cgroups under one parent created for this process (root only)."""

    def __init__(self, kind: str, mem_base: Path, pids_base: Path) -> None:
        self.kind = kind  # "cgroup v1" | "cgroup v2"
        self._mem_base, self._pids_base = mem_base, pids_base
        self._free: list[int] = []
        self._next = 0
        self._limits: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(cls) -> CgroupSlots | None:
        """The slots, or None when this host gives us no writable memory and pids controllers."""
        if os.geteuid() != 0:
            return None
        mem, pids = _own_path("memory"), _own_path("pids")
        # one parent per CgroupSlots, not per process: removing one never empties another's slots
        name = f"pippa-sandbox-{os.getpid()}-{secrets.token_hex(3)}"
        if mem is not None and pids is not None and (ROOT / "memory").is_dir() and (ROOT / "pids").is_dir():
            mb, pb = ROOT / "memory" / mem.lstrip("/") / name, ROOT / "pids" / pids.lstrip("/") / name
            with contextlib.suppress(OSError):
                _remove_stale(mb.parent)
                _remove_stale(pb.parent)
                mb.mkdir(exist_ok=True)
                pb.mkdir(exist_ok=True)
                return cls._registered(cls("cgroup v1", mb, pb))
            return None
        own = _own_path("")
        if own is not None and (ROOT / "cgroup.controllers").exists():
            # v2: processes may only live in leaves, so the parent is a sibling of our own cgroup
            base = ROOT / own.lstrip("/")
            parent = base.parent if base != ROOT else ROOT
            with contextlib.suppress(OSError):
                _remove_stale(parent)
                b = parent / name
                b.mkdir(exist_ok=True)
                (b / "cgroup.subtree_control").write_text("+memory +pids")
                return cls._registered(cls("cgroup v2", b, b))
        return None

    @staticmethod
    def _registered(slots: CgroupSlots) -> CgroupSlots:
        atexit.register(slots.remove)
        return slots

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the slots and their parents; a dead run's last pid is freed a little after its exit,
        so busy directories are retried for up to ``wait_s``."""
        remove_tree(self._mem_base, self._pids_base, wait_s=wait_s)

    def acquire(self, memory_bytes: int, max_pids: int) -> int:
        with self._lock:
            ready = [s for s in self._free if self._emptied(s)]
            if ready:
                slot = ready[0]
                self._free.remove(slot)
            else:
                slot, self._next = self._next, self._next + 1
        mem, pids = self._mem_base / str(slot), self._pids_base / str(slot)
        mem.mkdir(exist_ok=True)
        pids.mkdir(exist_ok=True)
        if self._limits.get(slot) != (memory_bytes, max_pids):
            if self.kind == "cgroup v1":
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

    def counters(self, slot: int) -> Counters:
        mem, pids = self._mem_base / str(slot), self._pids_base / str(slot)
        oom_file = mem / ("memory.oom_control" if self.kind == "cgroup v1" else "memory.events")
        return Counters(_read_key(oom_file, "oom_kill"), _read_key(pids / "pids.events", "max"))
