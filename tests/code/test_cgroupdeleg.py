"""Where an ordinary user's sandbox cgroups go (``pippa_contract.cgroupdeleg``), on cgroup trees built
in a temp dir: the cgroup v2 paths this machine (v1) cannot run, and the refusals' one line each.
The v1 path runs for real in test_hostile.py (a delegated subtree and a throw-away user)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pippa_contract import cgroupdeleg
from training_core.sandbox.cgroups import CgroupSlots

USER = 4242
SCOPE = "/user.slice/user-4242.slice/user@4242.service/app.slice/run-r1.scope"


def _v2(tmp_path: Path, owner: int = USER, controllers: str = "cpu memory pids") -> Path:
    root = tmp_path / "cg"
    base = root / SCOPE.lstrip("/")
    base.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids io\n")
    for f in ("cgroup.procs", "cgroup.subtree_control"):
        (base / f).write_text("")
    (base / "cgroup.controllers").write_text(controllers + "\n")
    if os.geteuid() == 0:
        for p in (base, base / "cgroup.procs", base / "cgroup.subtree_control"):
            os.chown(p, owner, owner)
    return root


def _own(ctrl: str, path: str) -> dict[str, str]:
    return cgroupdeleg.own_paths(f"0::{path}\n" if ctrl == "" else f"4:{ctrl}:{path}\n")


def test_v2_delegated_scope_plan_moves_the_trainer_into_a_leaf(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chowns the fake tree")
    root = _v2(tmp_path)
    got = cgroupdeleg.plan(str(root), _own("", SCOPE), USER)
    assert isinstance(got, cgroupdeleg.Plan), got
    base = str(root / SCOPE.lstrip("/"))
    assert (got.kind, got.memory_parent, got.pids_parent, got.delegated) == ("cgroup v2", base, base, True)
    assert got.move_self_to == os.path.join(base, "pippa-trainer")
    # once the trainer sits in its leaf, the plan is the same (a second launcher in the process)
    again = cgroupdeleg.plan(str(root), _own("", SCOPE + "/pippa-trainer"), USER)
    assert again == got


def test_v2_delegated_slots_enable_the_controllers_below_the_trainer(tmp_path: Path) -> None:
    """What CgroupSlots.create writes on a delegated v2 scope: the trainer's pid into its own leaf,
    then +memory +pids on the scope and on the slots' parent (plain files here: the kernel's act of
    making the controller files is what v2 hosts add)."""
    if os.geteuid() != 0:
        pytest.skip("chowns the fake tree")
    root = _v2(tmp_path)
    base = root / SCOPE.lstrip("/")
    slots = CgroupSlots.create(root, _own("", SCOPE), USER)
    try:
        assert isinstance(slots, CgroupSlots), slots
        assert slots.kind == "cgroup v2 (delegated)"
        assert (base / "pippa-trainer" / "cgroup.procs").read_text() == str(os.getpid())
        assert (base / "cgroup.subtree_control").read_text() == "+memory +pids"
        parents = list(base.glob("pippa-sandbox-*"))
        assert len(parents) == 1 and (parents[0] / "cgroup.subtree_control").read_text() == "+memory +pids"
        # another process in the scope (accelerate's launcher): moved after this one (each write to a
        # plain file replaces it; the kernel's cgroup.procs appends)
        (base / "cgroup.procs").write_text(f"{os.getpid()}\n4000000\n")
        assert isinstance(CgroupSlots.create(root, _own("", SCOPE), USER), CgroupSlots)
        assert (base / "pippa-trainer" / "cgroup.procs").read_text() == "4000000"
    finally:
        shutil.rmtree(root)


def test_v2_refusals_say_why_in_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chowns the fake tree")
    root = _v2(tmp_path / "a", owner=0)  # systemd's session scope: root's, not delegated
    why = cgroupdeleg.plan(str(root), _own("", SCOPE), USER)
    assert why == f"cgroup v2: this process's cgroup ({SCOPE}) is not delegated to this user"
    root = _v2(tmp_path / "b", controllers="cpu")  # delegated without the controllers
    why = cgroupdeleg.plan(str(root), _own("", SCOPE), USER)
    assert why == f"cgroup v2: the delegated cgroup {SCOPE} lacks the memory and pids controller"
    assert isinstance(CgroupSlots.create(root, _own("", SCOPE), USER), str)


def test_v2_root_uses_a_sibling_of_its_own_cgroup(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    got = cgroupdeleg.plan(str(root), _own("", SCOPE), 0)
    assert isinstance(got, cgroupdeleg.Plan) and not got.delegated and got.move_self_to is None
    assert got.memory_parent == str((root / SCOPE.lstrip("/")).parent)


def test_v1_user_needs_its_memory_and_pids_cgroups_to_be_its_own(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chowns the fake tree")
    root = tmp_path / "cg"
    own = cgroupdeleg.own_paths("4:memory:/u/run\n8:pids:/u/run\n")
    for ctrl in ("memory", "pids"):
        (root / ctrl / "u" / "run").mkdir(parents=True)
        (root / ctrl / "u" / "run" / "cgroup.procs").write_text("")
    why = cgroupdeleg.plan(str(root), own, USER)
    assert why == "cgroup v1: this user's memory and pids cgroups (/u/run, /u/run) are not its own to write"
    for ctrl in ("memory", "pids"):
        for p in (root / ctrl / "u" / "run", root / ctrl / "u" / "run" / "cgroup.procs"):
            os.chown(p, USER, USER)
    got = cgroupdeleg.plan(str(root), own, USER)
    assert isinstance(got, cgroupdeleg.Plan) and got.delegated and got.kind == "cgroup v1"
    assert (
        cgroupdeleg.plan(str(tmp_path / "none"), own, USER)
        == "no memory and pids cgroup controllers are mounted"
    )


def test_pippa_up_says_which_isolation_and_why() -> None:
    """`pippa up`'s sandbox line names the cgroups that give strict, or why there are none and how."""
    from pippa_ops.provision.prep import Sandbox

    base = {"bwrap": "/usr/bin/bwrap", "works": True, "seccomp": True}
    strict = Sandbox.from_json(
        {
            **base,
            "cgroups": True,
            "level": "strict",
            "cgroups_why": "cgroup v2 caps per run (a delegated subtree: /x)",
        }
    )
    assert strict.summary() == (
        "ok (/usr/bin/bwrap), isolation strict: cgroup v2 caps per run (a delegated subtree: /x)"
    )
    weak = Sandbox.from_json(
        {
            **base,
            "level": "rlimits",
            "cgroups_why": "cgroup v2: this process's cgroup (/user.slice) is not delegated to this user",
        }
    )
    line = weak.summary()
    assert "isolation rlimits at best" in line and "not delegated" in line and "Delegate=yes" in line
    # never "ok" where the default (strict) code recipe, code_tests, is refused
    assert line.startswith(
        "not strict (/usr/bin/bwrap), isolation rlimits at best: code recipes asking for "
        "strict isolation (the default, as code_tests) are refused here; "
    ), line
