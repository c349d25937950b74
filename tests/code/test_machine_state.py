"""A sandbox sees no machine-wide state: a survey of its /proc and /sys, the channels through the
machine's counters, gauges and per-user accounting (``hostile_machine_state``), and the code game
against programs that read them."""

from __future__ import annotations

import json
import os

import hostile_machine_state as hms
import hostile_suite
import pytest

from training_core.code.mbpp_game import play
from training_core.sandbox import SandboxLimits, SandboxUnavailable, detect, isolation, procview, run_python
from training_core.sandbox.pool import default_pool


@pytest.mark.parametrize("where", ["detect", "default_pool"])
def test_a_survey_of_the_sandboxs_proc_and_sys_finds_nothing_machine_wide(where: str) -> None:
    """Every file under the sandbox's /proc and /sys: the ones a program can open are its own process's
    files and nothing else (no meminfo, vmstat, stat, loadavg, pressure, keys, sys/fs, mountinfo, net,
    another process's), and /sys is not there. The code game's sandboxes (``default_pool``) too."""
    launcher = detect() if where == "detect" else default_pool().launcher
    r = run_python(hms.SURVEY, SandboxLimits(timeout_s=30, max_output_bytes=1 << 20), launcher)
    assert r.ok, r.stderr[-2000:]
    got = json.loads(r.stdout)
    machine_wide = [p for p in got["opened"] if not hms.own(p, got["me"])]
    assert machine_wide == [] and got["total"] == len(got["opened"]), machine_wide[:40]
    assert got["seen"] > 1000 and not got["sys"]  # the walk saw /proc's thousands of files
    assert f"/proc/{got['me']}/status" in got["opened"]  # a program still reads its own status
    assert got["cpus"] == len(os.sched_getaffinity(0))  # os.cpu_count() still answers


def test_the_machine_state_channels_are_contained_as_root() -> None:
    """mlock's global counter between fresh runs, the Mlocked and Shmem gauges between concurrent
    runs, per-user signal and message-queue accounting, /proc/keys, sysinfo(2), mlock, mountinfo,
    uptime, loadavg and /proc/sys/fs counters. (As an ordinary user: ``test_hostile.py``.)"""
    outcomes, launcher = hostile_suite.run_suite(areas=("machine_state",))
    escaped = [f"{o.name}: {o.evidence}" for o in outcomes if not o.contained]
    assert len(outcomes) == len(hms.CHANNELS) + len(hms.SINGLE)
    assert escaped == [], hostile_suite.summary(outcomes, launcher)


def test_the_code_game_cannot_be_won_by_reading_or_leaving_machine_state() -> None:
    """Five rounds of the game against programs that leave a value in the mlock counter for their
    second run, or print what the machine shows (its keys, memory, boot id, mount table): each round
    each is invalid (-1: its two runs disagree), never a win; the honest program wins every round."""
    names = [*hms.GAME, "honest"]
    wins = dict.fromkeys(names, 0)
    for _ in range(5):
        rewards = play([*hms.GAME.values(), "print(6 * 7)"], lambda ps: ["<answer>0</answer>"] * len(ps))
        for name, reward in zip(names, rewards, strict=True):
            wins[name] += reward == 1.0
            if name != "honest":
                assert reward == -1.0, (name, rewards)
    assert wins == {**dict.fromkeys(hms.GAME, 0), "honest": 5}


def test_strict_needs_landlock_and_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without Landlock (its lsm= list lacks it) cannot keep the machine's /proc files from a
    program: strict is refused with the reason and the way to get it; rlimits runs and says what is open."""
    monkeypatch.setattr(procview, "landlock_abi", lambda: 0)
    with pytest.raises(SandboxUnavailable) as err:
        isolation.detect(level="strict")
    line = str(err.value)
    assert "\n" not in line and "no Landlock" in line and "Linux 5.13" in line
    weaker = isolation.detect(level="rlimits")
    assert weaker.landlock == 0 and weaker.read_roots() == "-"
    assert "NO Landlock: the machine's /proc files are readable" in weaker.isolation.header()
    monkeypatch.undo()  # the kernel as it is: a worker that had no cached launcher yet detects it now
    assert detect().landlock > 0  # this machine's kernel has it (the cached launcher is unaffected)


def test_the_games_invariant_holds_for_its_own_pool_and_names_each_gap_elsewhere() -> None:
    """``invariant_gaps``: nothing open for the game's own sandboxes (resident /usr, Landlock, the
    filter); a launcher without Landlock, on the host's /usr, or without a sandbox says so, and the
    game warns when it plays on one."""
    import dataclasses

    from training_core.code.mbpp_game import invariant_gaps
    from training_core.sandbox import SandboxPool

    assert invariant_gaps(default_pool().launcher) == ()
    open_proc = dataclasses.replace(default_pool().launcher, landlock=0)
    assert invariant_gaps(open_proc) == ("no Landlock: the machine's /proc files are readable",)
    assert invariant_gaps(detect()) == ("the host's /usr: its page cache is shared by every run",)
    assert "no sandbox: the program sees the host" in invariant_gaps(detect(force_mode="unsafe"))
    with (
        SandboxPool(workers=1, launcher=open_proc) as pool,
        pytest.warns(RuntimeWarning, match="no Landlock"),
    ):
        assert play(
            ["print(1)"],
            lambda ps: ["<answer>1</answer>"] * len(ps),
            pool=pool,
            limits=SandboxLimits(timeout_s=0.5),
        ) == [-1.0]


def test_the_same_sandbox_without_landlock_and_the_new_rules_shows_the_machine() -> None:
    """The control that gives the tests above their teeth: the strict sandbox without Landlock and
    without the filter's sysinfo and mlock rules opens meminfo, vmstat, loadavg and /proc/sys, and reads
    the mlock counter; the prelude's RLIMIT_MEMLOCK 0 alone still keeps a program from moving it (on
    the code before issue 46 this channel carried the value exactly: moved by 582, read back 582)."""
    import dataclasses

    from training_core.sandbox import seccomp

    before = dataclasses.replace(detect(), landlock=0, seccomp=seccomp.build(machine_state=False))
    r = run_python(hms.SURVEY, SandboxLimits(timeout_s=30, max_output_bytes=1 << 20), before)
    opened = json.loads(r.stdout)["opened"]
    assert {"/proc/meminfo", "/proc/vmstat", "/proc/loadavg"} <= set(opened)
    assert any(p.startswith("/proc/sys/") for p in opened)
    contained, evidence = hms.mlock_counter_between_runs(lambda code: run_python(code, launcher=before))
    assert "read 'value" in evidence and "(locked 0)" in evidence and contained, evidence
