"""What a sandboxed run was given (``Isolation``) and how its interpreter is started (``Launcher``).

``isolation.detect`` finds which of these this machine allows; this module only describes them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from training_core.errors import SandboxMissing
from training_core.sandbox import procview
from training_core.sandbox.cgroups import CgroupSlots
from training_core.sandbox.seccomp import Filter


class SandboxUnavailable(SandboxMissing):
    """No real isolation here: model-written code is refused rather than run unconfined. ``str()`` is
    one short line (the first reason and its fix); ``details`` is every mode tried and why it failed."""

    def __init__(self, line: str, details: str = "") -> None:
        super().__init__(line)
        self.details = details or line


@dataclass(frozen=True)
class Isolation:
    """What was applied to a sandboxed run; tests and logs read it, nothing is assumed."""

    mode: str  # bwrap-root | bwrap-user | unsafe
    network: bool  # True when the program had no network (empty network namespace)
    pid_namespace: bool  # True when the whole process tree dies with the program
    uid_dropped: bool  # True when the program ran under its own unprivileged uid
    filesystem: bool = False  # True when the host file system is hidden (only /usr read-only)
    memory_cap: str = "rlimit"  # "cgroup v1" | "cgroup v2": all processes together; "rlimit": per process
    pids_cap: str = "rlimit"  # "cgroup v1" | "cgroup v2" | "rlimit" (RLIMIT_NPROC in the namespace)
    notes: tuple[str, ...] = ()
    seccomp: str = ""  # what the seccomp filter denies (``seccomp.Filter.summary``); "" = no filter
    level: str = "strict"  # the recipe's sandbox.isolation this satisfies: strict | rlimits | unsafe

    def summary(self) -> str:
        """The run log's sandbox line, short: the mode and level, the caps, Landlock, the filter, and each
        warning's first words (``header`` has it all; the trainer writes it to the run's sandbox.txt)."""
        caps = (
            f"{self.memory_cap} caps"
            if self.memory_cap == self.pids_cap
            else f"memory cap {self.memory_cap}, process cap {self.pids_cap}"
        )
        found = [caps.replace("rlimit caps", "per-process caps (rlimits)")]
        found += [n.split(":")[0] for n in self.notes if n.startswith(("NO ", "UNSAFE"))]
        if any("Landlock ABI" in n for n in self.notes):
            found.append("Landlock /proc")
        found.append("seccomp filter" if self.seccomp else "NO seccomp filter")
        return f"sandbox: {self.mode} (isolation = {self.level}): {', '.join(found)}"

    def header(self) -> str:
        """Everything applied, and what was not (the run's sandbox.txt; ``summary`` is the log's line)."""
        caps = f"memory cap {self.memory_cap}, process cap {self.pids_cap}"
        notes = "".join(f"; {n}" for n in self.notes)
        return (
            f"sandbox: {self.mode} (isolation = {self.level}), {caps}{notes}; "
            f"{self.seccomp or 'NO seccomp filter'}"
        )


@dataclass(frozen=True)
class Launcher:
    """How to start the sandboxed interpreter: ``prefix`` goes before the interpreter argv."""

    isolation: Isolation
    python: str
    bwrap: str | None
    cgroups: CgroupSlots | None = None
    extra_ro: tuple[str, ...] = ()  # host paths bound read-only (an interpreter prefix outside /usr)
    setpriv: str | None = None  # util-linux setpriv: drops to the run's uid without forking the trainer
    seccomp: Filter | None = None  # installed by bwrap on the sandbox's processes (``--seccomp FD``)
    usr: str = "/usr"  # bound read-only as /usr: the host's, or a memory-resident copy (``usrcopy``)
    landlock: int = 0  # the kernel's Landlock ABI the prelude restricts reads with (``procview``); 0: none
    runsc: str | None = None  # gVisor's runsc: each run in a gVisor sandbox (``gvisor``), bwrap is None
    rootfs: str = ""  # the gVisor level's empty, read-only root file system

    def prefix(
        self,
        tmp_bytes: int,
        shm_bytes: int,
        sync_fds: tuple[int, int] | None = None,
        uid: int | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """bwrap's argv; ``sync_fds`` = (info fd, block fd): the sandbox waits until the caller has put
        its first process into the run's cgroup, so nothing it forks can start outside. ``uid``: run
        bwrap under that uid through ``setpriv`` (Popen's ``user=`` would make Python fork() the whole
        trainer instead of vfork())."""
        if self.bwrap is None:
            return []
        argv: list[str] = []
        if uid is not None and self.setpriv:
            argv = [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ]
        argv += [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            self.usr,
            "/usr",
        ]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = f"/{top}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(shm_bytes),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(tmp_bytes),
            "--tmpfs",
            "/tmp",
        ]
        for path in self.extra_ro:  # after the tmpfs mounts: a prefix under /tmp or /dev/shm stays seen
            argv += ["--ro-bind", path, path]
        argv += [
            "--remount-ro",
            "/",
            "--chdir",
            "/tmp",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]
        if sync_fds is not None:
            argv += ["--info-fd", str(sync_fds[0]), "--block-fd", str(sync_fds[1])]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        return argv

    def read_roots(self) -> str:
        """The prelude's Landlock argument: where the program may read files, or "-" for no Landlock."""
        return procview.readable(self.extra_ro) if self.landlock and self.bwrap else "-"

    @property
    def needs_uid(self) -> bool:
        return self.isolation.uid_dropped
