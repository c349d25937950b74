"""The hostile suite (``hostile_suite.py``) is contained as root and as an ordinary user.

As root the sandbox runs each program under its own uid with cgroup caps; as a user it runs in a
user namespace with rlimit and tmpfs caps. The user run uses a throw-away Unix user (created and
removed here, as ``sshd.py`` does for SSH hosts) so the test never depends on who runs it.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import hostile_suite
import pytest

from pippa_contract import cgroupdeleg
from training_core.sandbox.cgroups import remove_tree

REPO = Path(__file__).resolve().parents[2]


def test_every_hostile_program_is_contained_here() -> None:
    outcomes, launcher = hostile_suite.run_suite()
    escaped = [f"{o.area}/{o.name}: {o.evidence}" for o in outcomes if not o.contained]
    assert len(outcomes) >= 40
    assert escaped == [], hostile_suite.summary(outcomes, launcher)
    areas = {o.area for o in outcomes}
    assert {"kernel_keyring", "shared_state", "uncounted_memory", "kernel_interfaces"} <= areas
    assert len(outcomes) >= 70 and launcher.isolation.seccomp


def _as_throwaway_user(
    user_python: str, args: list[str], delegate: dict[str, int] | None = None
) -> dict[str, Any]:
    """The suite's JSON report, run by a throw-away user (``_run_as_throwaway_user``)."""
    suite = str(Path(hostile_suite.__file__).resolve())
    r = _run_as_throwaway_user([user_python, suite, "--json", *args], delegate)
    assert r.stdout.strip(), r.stderr[-2000:]
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return report


def _run_as_throwaway_user(
    argv: list[str], delegate: dict[str, int] | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv`` run by a throw-away user. ``delegate``: first put it in cgroups owned by that user,
    the way systemd delegates a subtree on a cgroup v1 host (a memory and a pids cgroup made by root
    with the given limits, the directory and its cgroup.procs and tasks chowned, the process moved in
    before it drops to the user)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("needs root and useradd/runuser to create a throw-away user")
    user = f"pippa-h{uuid.uuid4().hex[:8]}"
    top = Path(tempfile.mkdtemp(prefix="pippa-hostile-"))  # outside pytest's 0700 tree
    os.chmod(top, 0o755)
    home = top / "home"
    subprocess.run(
        ["useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-p", "*", user], check=True, capture_output=True
    )
    made: list[Path] = []
    try:
        home.mkdir()
        pw = pwd.getpwnam(user)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        argv = [
            "runuser",
            "-u",
            user,
            "--",
            "env",
            "-i",
            f"HOME={home}",
            f"PYTHONPATH={REPO}",
            "PATH=/usr/bin:/bin",
            *argv,
        ]
        if delegate is not None:
            made = _delegated_v1(f"pippa-deleg-{user}", pw.pw_uid, pw.pw_gid, delegate)
            moves = "; ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in made)
            argv = ["sh", "-c", f"{moves}; exec {shlex.join(argv)}"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=home)
    finally:
        subprocess.run(["userdel", "-f", user], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)
        for d in made:
            remove_tree(*sorted(d.rglob("pippa-sandbox-*")), wait_s=5.0)
            remove_tree(d, wait_s=5.0)


def _delegated_v1(name: str, uid: int, gid: int, limits: dict[str, int]) -> list[Path]:
    """Root makes a memory and a pids cgroup beside its own and hands them to ``uid``."""
    own = cgroupdeleg.own_paths(Path("/proc/self/cgroup").read_text())
    root = Path(cgroupdeleg.ROOT)
    if not all(c in own and (root / c).is_dir() for c in ("memory", "pids")):
        pytest.skip("not a cgroup v1 host (memory and pids hierarchies)")
    made = []
    for ctrl in ("memory", "pids"):
        d = root / ctrl / own[ctrl].lstrip("/") / name
        d.mkdir()
        made.append(d)
        for f, v in limits.items():
            if f.startswith(ctrl + "."):
                (d / f).write_text(str(v))
        for p in (d, d / "cgroup.procs", d / "tasks"):
            os.chown(p, uid, gid)
    return made


def test_every_hostile_program_is_contained_as_an_ordinary_user(user_python: str) -> None:
    report = _as_throwaway_user(user_python, [])
    escaped = [o for o in report["outcomes"] if not o["contained"]]
    assert report["mode"] == "bwrap-user" and len(report["outcomes"]) >= 40
    assert escaped == [], report["summary"]
    assert len(report["outcomes"]) >= 70 and "seccomp on" in report["summary"]


def test_an_ordinary_user_gets_strict_isolation_in_a_delegated_cgroup(user_python: str) -> None:
    """A user whose memory and pids cgroups are its own (delegated) runs at isolation = strict: each
    run in a cgroup of its own under the delegated one, whose limits cap all of the user's runs. The
    memory, fork and disk programs are held by the run's cgroup; before issue 35 strict was refused.
    The machine-state channels (per-user signal and message-queue accounting among them) are held too."""
    report = _as_throwaway_user(
        user_python,
        [
            "--only",
            "resources",
            "--only",
            "processes",
            "--only",
            "kernel_state",
            "--only",
            "persistence",
            "--only",
            "machine_state",
            "--only",
            "reward_forging/code_game_reads_machine_state",
        ],
        delegate={"memory.limit_in_bytes": 6 << 30, "pids.max": 2048},
    )
    escaped = [o for o in report["outcomes"] if not o["contained"]]
    assert report["mode"] == "bwrap-user" and report["level"] == "strict", report["summary"]
    assert report["memory_cap"] == "cgroup v1 (delegated)", report["summary"]
    assert escaped == [], report["summary"]
    assert len(report["outcomes"]) >= 40


def test_pippa_up_reports_a_delegated_cgroup_as_strict_and_its_absence_with_the_way_to_get_it(
    user_python: str,
) -> None:
    """The host probe `pippa up` runs (``pippa_agent.probe.sandbox_facts``), as an ordinary user with
    and without a delegated subtree: strict and where, or rlimits and why."""
    code = "import json; from pippa_agent.probe import sandbox_facts as f; print(json.dumps(f()))"
    with_it = json.loads(
        _run_as_throwaway_user([user_python, "-c", code], {"memory.limit_in_bytes": 1 << 30}).stdout
    )
    assert with_it["cgroups"], with_it
    assert with_it["cgroups_why"].startswith("cgroup v1 caps per run (a delegated subtree")
    assert (with_it["works"], with_it["seccomp"], with_it["level"]) == (True, True, "strict")
    without = json.loads(_run_as_throwaway_user([user_python, "-c", code]).stdout)
    assert not without["cgroups"] and "are not its own to write" in without["cgroups_why"]
    assert without["level"] == "rlimits"
