"""A strict code run of an ordinary user on a cgroup v2 host starts in a delegated systemd user scope
(``cgroupdeleg.scope_argv``, decided by ``training_core.launch.sandbox_scope``). This machine is
cgroup v1: the v2 decision and command line are tested here as pure functions, ``user_scope``'s trial
through a stand-in ``systemd-run`` on PATH; the v1 launch (no scope) runs for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pippa_contract import cgroupdeleg
from training_core.hardware.platform import PlatformFacts
from training_core.launch import sandbox_scope
from training_core.recipes import resolve

REPO = Path(__file__).resolve().parents[2]
NOT_DELEGATED = "cgroup v2: this process's cgroup (/user.slice/user-1000.slice/session-3.scope) is not ours"
SCOPE = ["systemd-run", "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]


def _cfg(recipe: str, *sets: str):  # type: ignore[no-untyped-def]
    return resolve(recipe, list(sets), PlatformFacts()).config


def test_a_strict_code_run_of_a_user_on_v2_starts_in_a_delegated_scope() -> None:
    prefix, line = sandbox_scope(_cfg("code_game"), euid=1000, where=NOT_DELEGATED, check=lambda: "", env={})
    assert prefix == SCOPE and "delegated systemd user scope" in line


def test_without_a_user_manager_the_run_is_not_wrapped_and_says_why() -> None:
    why = "systemd-run --user --scope -p Delegate=yes: Failed to connect"
    prefix, line = sandbox_scope(
        _cfg("code_tests"), euid=1000, where=NOT_DELEGATED, check=lambda: why, env={}
    )
    assert prefix == [] and "is not ours" in line and "Failed to connect" in line


def test_only_runs_that_need_the_scope_get_it() -> None:
    never = lambda: pytest.fail("the user manager was asked")  # noqa: E731
    code = _cfg("code_game")
    assert sandbox_scope(_cfg("tiny"), euid=1000, where=NOT_DELEGATED, check=never) == ([], "")
    assert sandbox_scope(
        _cfg("code_game", "sandbox.isolation=rlimits"), euid=1000, where=NOT_DELEGATED, check=never
    ) == ([], "")
    assert sandbox_scope(code, euid=0, where=NOT_DELEGATED, check=never) == ([], "")
    delegated = cgroupdeleg.Plan("cgroup v2", "/s", "/s", True, "/s/pippa-trainer")
    assert sandbox_scope(code, euid=1000, where=delegated, check=never) == ([], "")  # already in one
    slurm = sandbox_scope(code, euid=1000, where=NOT_DELEGATED, check=never, env={"SLURM_JOB_ID": "7"})
    assert slurm[0] == [] and "a SLURM job keeps its cgroup" in slurm[1]
    v1 = "cgroup v1: this user's memory and pids cgroups (/u, /u) are not its own to write"
    assert sandbox_scope(code, euid=1000, where=v1, check=never) == ([], "")  # v1: nothing to ask systemd


def test_user_scope_tries_a_scope_and_reports_its_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in systemd-run that fails as one without a user bus does; then one that runs the command
    in this process's own cgroups (this v1 host's, not a delegated v2 scope: refused with plan's word);
    then none at all."""
    fake = tmp_path / "systemd-run"
    fake.write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert cgroupdeleg.user_scope() == (
        "systemd-run --user --scope -p Delegate=yes: Failed to connect to bus: No medium found"
    )
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    assert cgroupdeleg.user_scope() == (
        "systemd-run --user --scope -p Delegate=yes: the scope is not delegated to this user"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert cgroupdeleg.user_scope() == "no systemd-run (no systemd user manager)"


def test_on_this_v1_host_the_launcher_execs_the_trainer_without_a_scope(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training_core.launch",
            "code_game",
            "--run-dir",
            str(tmp_path / "run"),
            "--print",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "training_core.train code_game" in r.stdout and "systemd-run" not in r.stdout


def test_an_ordinary_user_on_this_v1_host_gets_no_scope_and_no_trial() -> None:
    """This machine's real cgroup tree (v1), read as an ordinary user would: v1 has nothing a systemd
    scope would add (its delegation is a chown), so the trainer's own refusal line stands."""
    if not os.path.isdir(os.path.join(cgroupdeleg.ROOT, "memory")):
        pytest.skip("not a cgroup v1 host")
    where = cgroupdeleg.plan(euid=4242)
    assert isinstance(where, str) and where.startswith("cgroup v1:"), where
    never = lambda: pytest.fail("the user manager was asked")  # noqa: E731
    assert sandbox_scope(_cfg("code_game"), euid=4242, check=never) == ([], "")


def test_the_scope_finds_the_user_managers_bus_outside_a_login_session() -> None:
    """tmux's server or the agent may lack XDG_RUNTIME_DIR; systemd-run --user needs it for the bus."""
    assert cgroupdeleg.scope_env({"XDG_RUNTIME_DIR": "/run/user/1000"}) == {}
    run_dir = f"/run/user/{os.geteuid()}"
    assert cgroupdeleg.scope_env({}) == ({"XDG_RUNTIME_DIR": run_dir} if os.path.isdir(run_dir) else {})
