"""The gVisor level (``sandbox.isolation = "gvisor"``): a program runs in a gVisor sandbox of its own,
the machine-state channels are contained there as root and as an ordinary user, a missing or failing
runsc fails closed in one line, and a timeout leaves no runsc process or state directory behind.
``scripts/setup --test-deps`` installs Debian's runsc; where it is absent the tests that need it skip
with the reason (the fail-closed test runs everywhere)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import gvisor_channels
import hostile_machine_state as hms
import pytest
from test_hostile import _run_as_throwaway_user

from training_core.sandbox import (
    SandboxLimits,
    SandboxUnavailable,
    Status,
    detect,
    gvisor,
    isolation,
    run_python,
    seccomp,
)
from training_core.sandbox.launcher import Launcher

# One worker runs them in turn: the leftover check looks at every gVisor process of this machine.
pytestmark = pytest.mark.xdist_group("gvisor")
needs_runsc = pytest.mark.skipif(
    shutil.which("runsc", path=gvisor.SEARCH) is None,
    reason="no runsc (scripts/setup --test-deps installs it)",
)


@pytest.fixture(scope="module")
def gv() -> Launcher:
    return isolation.detect(level="gvisor")


@needs_runsc
def test_a_program_runs_in_gvisor_and_returns_its_output_exit_status_and_values(
    gv: Launcher,
) -> None:
    """Output, stderr, exit status, test-call values and a syntax error come back as at strict; inside
    is gVisor's kernel: no /proc/vmstat, a /proc/meminfo of its own (its free memory is the host's
    total less the sandbox's own use), no network, nothing of the host's file system but /usr."""
    assert gv.isolation.mode == "gvisor" and "isolation = gvisor" in gv.isolation.header()
    code = (
        "import os, socket, sys\n"
        "print(os.path.exists('/proc/vmstat'), sorted(os.listdir('/')))\n"
        "print(open('/proc/meminfo').read().split()[1:5:3])\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\nexcept OSError as e:\n"
        "    print('no network', type(e).__name__)\n"
        "sys.stderr.write('to stderr\\n')\n"
        "def f(x):\n    return [x, x * 2]\n"
        "raise SystemExit(3)\n"
    )
    r = run_python(code, launcher=gv, calls=["f(21)"])
    lines = r.stdout.splitlines()
    assert r.status is Status.RUNTIME_ERROR and r.exit_code == 3 and r.stderr == "to stderr\n", r
    assert lines[0].startswith("False") and "'root'" not in lines[0] and "'etc'" not in lines[0], lines
    total, free = (int(x) for x in json.loads(lines[1].replace("'", '"')))
    assert 0 < total - free < 1 << 20, lines  # KiB the sandbox itself uses, not the host's free memory
    assert lines[2].startswith("no network"), lines
    ok = run_python(
        "def f(x):\n    return [x, x * 2]\nprint('done')\n", launcher=gv, calls=["f(21)", "f('a')"]
    )
    assert ok.ok and ok.stdout == "done\n" and ok.values == ([21, 42], ["a", "aa"]) and ok.completed, ok
    bad = run_python("def f(:\n", launcher=gv)
    assert bad.status is Status.SYNTAX_ERROR and "SyntaxError" in bad.stderr
    big = run_python("b = bytearray(600 << 20)\n", SandboxLimits(memory_mb=256), launcher=gv)
    assert big.status is Status.MEMORY_LIMIT, big  # gVisor enforces the prelude's RLIMIT_AS


@needs_runsc
def test_the_machine_state_channels_are_contained_in_gvisor_as_root(gv: Launcher) -> None:
    """The mlock counter between fresh runs, the Mlocked and Shmem gauges between concurrent ones, per-user
    signal and message-queue accounting, /proc/keys: none carries the value. The gauge check has teeth:
    the strict sandbox without Landlock and the machine-state rules lets the Shmem gauge carry it."""
    out = gvisor_channels.check(gv)
    assert set(out) == set(gvisor_channels.CHANNELS)
    assert [f"{k}: {e}" for k, (ok, e) in out.items() if not ok] == []
    before = dataclasses.replace(detect(), landlock=0, seccomp=seccomp.build(machine_state=False))
    contained, evidence = gvisor_channels.gauge_moves("Shmem", hms.HOLD_SHMEM, 8192)(
        lambda code: run_python(code, launcher=before)
    )
    assert not contained, evidence


@needs_runsc
def test_the_machine_state_channels_are_contained_in_gvisor_as_an_ordinary_user(user_python: str) -> None:
    """The same channels with runsc --rootless, run by a throw-away user without a delegated cgroup."""
    r = _run_as_throwaway_user([user_python, str(Path(gvisor_channels.__file__).resolve())])
    assert r.stdout.strip(), r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["mode"] == "gvisor" and report["memory_cap"] == "rlimit", report
    assert set(report["outcomes"]) == set(gvisor_channels.CHANNELS)
    assert [k for k, (ok, _e) in report["outcomes"].items() if not ok] == [], report


def test_gvisor_without_a_working_runsc_fails_closed_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No runsc where it is looked for, a runsc path that does not exist, a runsc that fails: one line
    naming it and how to get it, never a weaker level in its place."""
    monkeypatch.setattr(gvisor, "SEARCH", "/nonexistent")
    for attempt in (lambda: isolation.detect(level="gvisor"), lambda: gvisor.detect("/nonexistent/runsc")):
        with pytest.raises(SandboxUnavailable) as err:
            attempt()
        line = str(err.value)
        assert "\n" not in line and "isolation = gvisor" in line and "not found" in line, line
        assert "apt-get install runsc" in line
    broken = tmp_path / "runsc"
    broken.write_text("#!/bin/sh\necho 'runsc: cannot create sandbox: boom' >&2\nexit 128\n")
    broken.chmod(0o755)
    with pytest.raises(SandboxUnavailable) as err:
        gvisor.detect(str(broken))
    line = str(err.value)
    assert "\n" not in line and "did not run a program" in line and "boom" in line, line


def _leftovers() -> tuple[set[str], set[str]]:
    """Processes whose command line names a run's directory, and those directories."""
    procs = set()
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pippa-gvisor-" in cmd and b"pippa-gvisor-root-" not in cmd:
            procs.add(f"{p.name} {cmd[:200]!r}")
    dirs = {d.name for d in Path(tempfile.gettempdir()).glob("pippa-gvisor-*") if "-root-" not in d.name}
    return procs, dirs


@needs_runsc
@pytest.mark.parametrize("caps", ["cgroup slot", "no cgroup"])
def test_a_timeout_kills_the_container_and_leaves_nothing(gv: Launcher, caps: str) -> None:
    """A program that forks and spins past its time cap: TIMEOUT, and afterwards no process of its
    runsc, sentry or gofer and no bundle or state directory is left; with a cgroup slot every process
    in it is killed, without one runsc delete --force ends the container."""
    launcher = gv if caps == "cgroup slot" else dataclasses.replace(gv, cgroups=None)
    if caps == "cgroup slot" and gv.cgroups is None:
        pytest.skip("no writable cgroup here")
    before = _leftovers()
    r = run_python(
        "import os\nos.fork()\nos.fork()\nwhile True:\n    pass\n",
        SandboxLimits(timeout_s=1),
        launcher=launcher,
    )
    assert r.status is Status.TIMEOUT and "time cap" in r.reason, r
    assert _leftovers() == before
    assert os.path.isdir(gv.rootfs)  # the launcher's empty root stays for the next run


@needs_runsc
def test_the_code_game_holds_its_invariant_in_gvisor(gv: Launcher) -> None:
    """The game's invariant holds for gVisor on the resident /usr (no gap named); on the host's /usr its
    page cache is named. A round of the game there: the mlock-counter cheat is invalid (its two runs
    disagree), the honest program wins."""
    from training_core.code.mbpp_game import invariant_gaps, play
    from training_core.sandbox import SandboxPool, resident

    on_copy = resident(gv)
    assert invariant_gaps(on_copy) == ()
    assert invariant_gaps(gv) == ("the host's /usr: its page cache is shared by every run",)
    with SandboxPool(workers=2, launcher=on_copy) as pool:
        rewards = play(
            [hms.GAME["mlock_counter"], "print(6 * 7)"],
            lambda ps: ["<answer>0</answer>"] * len(ps),
            pool=pool,
            limits=SandboxLimits(timeout_s=1),
        )
    assert rewards == [-1.0, 1.0]


FORK_BOMB = (
    "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
    "            import time\n            time.sleep(3)\n            os._exit(0)\n        n += 1\n"
    "except OSError as e:\n    print('refused after', n, e.errno)\n"
)
# five processes of 200 MiB each, every one under its own RLIMIT_AS of 256 MiB
HOG = (
    "import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n        b = bytearray(200 << 20)\n"
    "        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
    "        time.sleep(2)\n        os._exit(0)\n"
    "for _ in range(5):\n    os.wait()\nprint('all held')\n"
)


@needs_runsc
def test_gvisor_caps_a_runs_processes_and_their_memory_together(gv: Launcher) -> None:
    """gVisor enforces the prelude's RLIMIT_NPROC on the program's processes (a fork bomb stops at
    max_processes), and the run's cgroup slot caps all of them together with gVisor's own memory: five
    processes of 200 MiB, each under its 256 MiB RLIMIT_AS, pass 512 MiB + 256 MiB for gVisor."""
    bomb = run_python(FORK_BOMB, SandboxLimits(max_processes=8), launcher=gv)
    assert bomb.ok and bomb.stdout.split()[:3] == ["refused", "after", "7"], bomb
    if gv.cgroups is None:
        pytest.skip("no writable cgroup here for the aggregate memory cap")
    hog = run_python(HOG, SandboxLimits(timeout_s=8, memory_mb=256, total_memory_mb=512), launcher=gv)
    assert hog.status is Status.MEMORY_LIMIT and "all held" not in hog.stdout, hog
    assert "MiB for gVisor" in hog.reason
