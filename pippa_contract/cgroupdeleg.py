"""Where a trainer may put its sandboxes' cgroups: the rule the trainer follows and ``pippa up`` reports.

A run's memory and process caps are cgroups made under a parent this process may write:

- root: a cgroup beside its own (v2: a sibling, since processes live only in leaves; v1: a child in
  the ``memory`` and ``pids`` hierarchies);
- an ordinary user, cgroup v2: a delegated subtree (``systemd-run --user --scope -p Delegate=yes``,
  or one ``pippa up`` prepares with sudo): its own cgroup directory, ``cgroup.procs`` and
  ``cgroup.subtree_control`` writable by it, with the memory and pids controllers. The trainer first
  moves itself into a leaf of its own (``pippa-trainer``), then enables the controllers below;
- an ordinary user, cgroup v1: its own cgroups in the ``memory`` and ``pids`` hierarchies writable by
  it (systemd's delegation on v1 hosts, or a subtree root made and chowned); children it makes are
  its own, limits included.

The delegated parent's own limits (set by whoever delegated it) cap all of the user's runs together.
Stdlib only, python3 >= 3.8 (the host agent's probe imports it too).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
TRAINER_LEAF = "pippa-trainer"  # v2, delegated: where the trainer moves itself
HOW_TO = (
    "run the trainer as root, or in a delegated cgroup: on cgroup v2 start it under "
    "'systemd-run --user --scope -p Delegate=yes' (pippa run does where the user's systemd manager "
    "delegates), on v1 chown its memory and pids cgroups to the user"
)


@dataclass(frozen=True)
class Plan:
    """Where slot parents go, and what the trainer does first."""

    kind: str  # "cgroup v1" | "cgroup v2"
    memory_parent: str  # directory under which the memory slot parent is made
    pids_parent: str  # the same for pids (equal to memory_parent on v2)
    delegated: bool  # an ordinary user's delegated subtree (not root's)
    move_self_to: str | None = None  # v2 delegated: the leaf the trainer moves into before anything

    def describe(self) -> str:
        who = "a delegated subtree" if self.delegated else "root"
        return f"{self.kind} caps per run ({who}: {self.memory_parent})"


def own_paths(text: str) -> dict[str, str]:
    """/proc/self/cgroup as controller -> path ("" is the v2 tree)."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ctrls = parts[1].split(",") if parts[1] else [""]
        for c in ctrls:
            own[c] = parts[2]
    return own


def _owned(path: str, euid: int) -> bool:
    """Delegated to ``euid``: owned by it and writable by its owner (delegation is a chown, and root
    passes any access check, so ownership is what tells a delegated cgroup from another)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == euid and bool(st.st_mode & 0o200)


def plan(root: str = ROOT, own: dict[str, str] | None = None, euid: int | None = None) -> Plan | str:
    """Where this process's sandbox cgroups go, or one line saying why there is nowhere."""
    if own is None:
        try:
            with open("/proc/self/cgroup") as f:
                own = own_paths(f.read())
        except OSError as e:
            return f"no /proc/self/cgroup ({e.strerror})"
    euid = os.geteuid() if euid is None else euid
    is_root = euid == 0
    if (
        "memory" in own
        and "pids" in own
        and os.path.isdir(os.path.join(root, "memory"))
        and os.path.isdir(os.path.join(root, "pids"))
    ):
        mem = os.path.join(root, "memory", own["memory"].lstrip("/"))
        pids = os.path.join(root, "pids", own["pids"].lstrip("/"))
        if is_root:
            return Plan("cgroup v1", mem, pids, False)
        if all(
            _owned(p, euid)
            for p in (mem, pids, os.path.join(mem, "cgroup.procs"), os.path.join(pids, "cgroup.procs"))
        ):
            return Plan("cgroup v1", mem, pids, True)
        return (
            f"cgroup v1: this user's memory and pids cgroups ({own['memory']}, {own['pids']}) are not "
            f"its own to write"
        )
    if "" in own and os.path.exists(os.path.join(root, "cgroup.controllers")):
        base = os.path.normpath(os.path.join(root, own[""].lstrip("/")))
        if os.path.basename(base) == TRAINER_LEAF and not is_root:
            base = os.path.dirname(base)  # moved there already (an earlier plan's move)
        if is_root:
            parent = base if base == os.path.normpath(root) else os.path.dirname(base)
            return Plan("cgroup v2", parent, parent, False)
        files = [os.path.join(base, f) for f in ("cgroup.procs", "cgroup.subtree_control")]
        if not (_owned(base, euid) and all(_owned(f, euid) for f in files)):
            return f"cgroup v2: this process's cgroup ({own['']}) is not delegated to this user"
        try:
            with open(os.path.join(base, "cgroup.controllers")) as f:
                have = f.read().split()
        except OSError:
            have = []
        missing = [c for c in ("memory", "pids") if c not in have]
        if missing:
            return f"cgroup v2: the delegated cgroup {own['']} lacks the {' and '.join(missing)} controller"
        return Plan("cgroup v2", base, base, True, os.path.join(base, TRAINER_LEAF))
    return "no memory and pids cgroup controllers are mounted"


def scope_argv(systemd_run: str = "systemd-run") -> list[str]:
    """The prefix that starts a command in a transient scope of the user's systemd manager, delegated to
    the user (memory and pids, systemd's default for a user manager). No MemoryMax/TasksMax: the trainer
    lives in the scope too, and each sandbox run gets its own capped cgroup below it (as under root)."""
    return [systemd_run, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]


def scope_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``systemd-run --user`` needs of the environment beyond ``environ``: the user's runtime
    directory (its manager's bus), which a process started outside a login session (tmux's server, an
    agent) may lack; ``{}`` when it is there or there is none."""
    run_dir = f"/run/user/{os.geteuid()}"
    if environ.get("XDG_RUNTIME_DIR") or not os.path.isdir(run_dir):
        return {}
    return {"XDG_RUNTIME_DIR": run_dir}


def wants_scope(where: Plan | str, euid: int) -> bool:
    """Whether a delegated scope could give this process what ``plan`` found missing: an ordinary user on
    a cgroup v2 host whose own cgroup is not delegated (a login session's scope is root's)."""
    return euid != 0 and isinstance(where, str) and where.startswith("cgroup v2: this process's cgroup")


# run inside a trial scope: name its cgroup, then hold the scope open until stdin closes
_HOLD = (
    "import sys; print(open('/proc/self/cgroup').read().replace('\\n', ';'), flush=True); sys.stdin.read()"
)


def user_scope(timeout: float = 30.0) -> str:
    """ "" when ``scope_argv`` gives this user a delegated cgroup with memory and pids, else one line saying
    why not. Tried: a python started in a trial scope names its cgroup and waits while ``plan`` judges
    that cgroup (the same rule the trainer follows there). ``pippa up``'s probe reports it; the launcher
    (training_core.launch) decides with it."""
    found = shutil.which("systemd-run")
    if found is None:
        return "no systemd-run (no systemd user manager)"
    head = "systemd-run --user --scope -p Delegate=yes"
    try:
        p = subprocess.Popen(
            [*scope_argv(found), sys.executable, "-S", "-I", "-c", _HOLD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **scope_env(os.environ)},
        )
    except OSError as e:
        return f"{head}: {e.strerror or e}"
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    try:
        ready = select.select([p.stdout], [], [], timeout)[0]
        line = p.stdout.readline().strip() if ready else ""
        if line:
            where = plan(own=own_paths(line.replace(";", "\n")))  # while the scope still holds the python
            if isinstance(where, Plan) and where.delegated and where.kind == "cgroup v2":
                return ""
            return f"{head}: {where if isinstance(where, str) else 'the scope is not delegated to this user'}"
        if not ready:
            return f"{head}: no answer in {timeout:g} s"
        p.stdin.close()
        p.wait(timeout)
        return f"{head}: {(p.stderr.read().strip().splitlines() or [f'exit status {p.returncode}'])[-1]}"
    finally:
        with contextlib.suppress(OSError):
            p.stdin.close()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
