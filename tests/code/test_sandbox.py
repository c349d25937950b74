"""Hostile programs are contained and reported with the right status; the test process stays healthy.

Every case runs under small limits so a containment bug cannot take the machine down with it.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from training_core.sandbox import SandboxLimits, SandboxPool, SandboxUnavailable, Status, detect, run_python
from training_core.sandbox import isolation as sandbox_isolation

SMALL = SandboxLimits(
    timeout_s=1.5, memory_mb=256, max_processes=8, max_output_bytes=64 * 1024, max_file_bytes=1 << 20
)


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (how escaped processes are found)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(int(entry))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique ``sleep`` argument; any process still carrying it after the run is a survivor."""
    m = f"{time.time() % 1000 + 1000:.6f}"
    yield m
    for pid in processes_with(m):  # clean up if containment failed, so the machine stays healthy
        os.kill(pid, signal.SIGKILL)


def test_isolation_applied_as_root() -> None:
    """As root (here and in CI) the program gets namespaces and its own uid, and says so."""
    iso = detect().isolation
    if os.geteuid() != 0:
        pytest.skip("the strongest mode needs root")
    assert (iso.mode, iso.network, iso.pid_namespace, iso.uid_dropped, iso.filesystem) == (
        "bwrap-root",
        True,
        True,
        True,
        True,
    )


def test_clean_program_runs_with_output() -> None:
    r = run_python("print('hello')", SMALL)
    assert (r.status, r.exit_code, r.stdout, r.stderr, r.completed) == (Status.OK, 0, "hello\n", "", True)


def test_syntax_and_indentation_errors_are_told_apart_from_runtime_syntax_error() -> None:
    assert run_python("def f(:\n  pass", SMALL).status is Status.SYNTAX_ERROR
    assert run_python("if True:\nprint(1)", SMALL).status is Status.SYNTAX_ERROR
    # raising SyntaxError at run time is an ordinary runtime error, not a cheaper -0.5
    assert run_python("raise SyntaxError('x')", SMALL).status is Status.RUNTIME_ERROR


def test_infinite_loop_times_out_on_the_wall_clock() -> None:
    t0 = time.monotonic()
    r = run_python("while True:\n    pass", SMALL)
    assert r.status is Status.TIMEOUT
    assert time.monotonic() - t0 < SMALL.timeout_s + 5.0  # killed, not left to spin; slack for load


def test_fork_bomb_is_capped_and_leaves_no_process(marker: str) -> None:
    code = (
        "import os\nwhile True:\n    try:\n        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['sleep', '{marker}'])\n    except OSError:\n        pass\n"
    )
    r = run_python(code, SMALL)
    assert r.status is Status.TIMEOUT
    assert processes_with(marker) == []


def test_uncaught_fork_bomb_dies_at_the_process_limit() -> None:
    r = run_python("import os, time\nwhile True:\n    os.fork()\n", SMALL)
    assert r.status is Status.RUNTIME_ERROR
    assert "BlockingIOError" in r.stderr or "Resource temporarily unavailable" in r.stderr


def test_memory_bomb_hits_the_memory_limit() -> None:
    # A time cap the memory cap always beats: on a loaded 2-core machine the 1.5 s of SMALL once ran out
    # first (status timeout) while the blocks were still being allocated.
    roomy = dataclasses.replace(SMALL, timeout_s=20)
    r = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))", roomy)
    assert r.status is Status.MEMORY_LIMIT
    assert run_python("x = bytearray(10**10)", roomy).status is Status.MEMORY_LIMIT


def test_gigabyte_of_output_is_cut_and_killed_quickly() -> None:
    t0 = time.monotonic()
    r = run_python("import sys\nfor _ in range(2**14):\n    sys.stdout.write('x' * 2**16)", SMALL)
    assert r.status is Status.OUTPUT_LIMIT
    assert len(r.stdout) == SMALL.max_output_bytes and r.truncated
    # cut at the cap, not at the 1.5 s timeout (OUTPUT_LIMIT says so); writing it all takes far longer
    assert time.monotonic() - t0 < 10


def test_writes_outside_the_temp_dir_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "evil.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('pwned')", SMALL)
    assert r.status is Status.RUNTIME_ERROR and "FileNotFoundError" in r.stderr  # the host fs is not there
    assert not target.exists()
    home = Path(os.path.expanduser("~")) / f"pippa-evil-{uuid.uuid4().hex}"
    r = run_python(f"open({str(home)!r}, 'w').write('pwned')", SMALL)
    assert r.status is Status.RUNTIME_ERROR and not home.exists()
    # its own working directory is writable, and it does not outlive the run
    r = run_python("open('scratch.txt', 'w').write('ok'); import os; print(os.getcwd())", SMALL)
    assert r.ok and r.stdout == "/tmp\n"
    r = run_python("print(open('scratch.txt').read())", SMALL)
    assert r.status is Status.RUNTIME_ERROR and "FileNotFoundError" in r.stderr


def test_parent_environment_secrets_are_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"fake-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    code = (
        "import os\nprint(dict(os.environ))\n"
        "for p in ('/proc/%d/environ' % PARENT, '/proc/self/environ', '/proc/1/environ'):\n"
        "    try:\n        print(open(p, 'rb').read())\n"
        "    except OSError as e:\n        print('denied', p)\n"
    )
    r = run_python(f"PARENT = {os.getpid()}\n{code}", SMALL)
    assert r.ok
    assert secret not in r.stdout + r.stderr
    assert f"denied /proc/{os.getpid()}/environ" in r.stdout
    assert "WANDB_API_KEY" not in r.stdout
    assert f"'HOME': '{os.environ['HOME']}'" not in r.stdout  # not the caller's HOME


def test_network_connection_to_a_local_listener_fails() -> None:
    if not detect().isolation.network:
        pytest.skip("no network namespace on this machine (reported in Isolation.network)")
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(0.3)
        port = srv.getsockname()[1]
        r = run_python(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')",
            SMALL,
        )
        with pytest.raises(socket.timeout):
            srv.accept()
    assert r.status is Status.RUNTIME_ERROR and "connected" not in r.stdout


def test_killing_the_parent_process_fails() -> None:
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    try:
        code = (
            f"import os, signal\nfor pid in ({os.getpid()}, os.getppid()):\n"
            "    try:\n        os.kill(pid, signal.SIGUSR1)\n        print('sent', pid)\n"
            "    except OSError as e:\n        print('refused', pid, e.errno)\n"
            "try:\n    os.killpg(os.getpgid(0), signal.SIGUSR1)\nexcept OSError:\n    pass\n"
            "os.kill(-1, signal.SIGUSR1)\n"
        )
        r = run_python(code, SMALL)
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == []
    assert f"sent {os.getpid()}" not in r.stdout


def test_setsid_double_fork_leaves_no_survivor(marker: str) -> None:
    code = (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\n"
        "os.wait()\nprint('parent done')\n"
    )
    r = run_python(code, SMALL)
    assert r.ok and r.stdout == "parent done\n"
    time.sleep(0.05)
    assert processes_with(marker) == []


def test_sys_exit_tricks_are_reported_faithfully() -> None:
    r = run_python("import sys\nprint('a')\nsys.exit(0)\nprint('b')", SMALL)
    assert (r.status, r.stdout, r.completed) == (Status.OK, "a\n", False)  # exit 0, but did not finish
    r = run_python("import os\nos._exit(0)\nraise ValueError", SMALL)
    assert (r.status, r.completed) == (Status.OK, False)
    assert run_python("import sys; sys.exit(3)", SMALL).exit_code == 3
    r = run_python("import sys; sys.exit('boom')", SMALL)
    assert (r.status, r.stderr) == (Status.RUNTIME_ERROR, "boom\n")
    # an atexit handler cannot turn a crash into a clean exit
    r = run_python("import atexit, os\natexit.register(lambda: os._exit(0))\n1/0", SMALL)
    assert r.status is Status.RUNTIME_ERROR


def test_pool_runs_in_parallel_and_keeps_order() -> None:
    # each program prints its index and when it started and ended; all four alive at one moment is
    # what "in parallel" means, with no bound on how long a busy machine takes to start them
    program = "import time; a = time.time(); time.sleep(2.0); print({i}, a, time.time())"
    with SandboxPool(workers=4, limits=dataclasses.replace(SMALL, timeout_s=20)) as pool:
        results = pool.map([program.format(i=i) for i in range(4)])
    rows = [r.stdout.split() for r in results]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert max(float(row[1]) for row in rows) < min(float(row[2]) for row in rows)


@pytest.mark.parametrize("mode", ["bwrap-user", "unsafe"])
def test_weaker_modes_still_run_programs_and_say_what_is_missing(mode: str) -> None:
    """What a non-root caller gets (bwrap in a user namespace: network and file system still cut) or,
    only when asked for, unsafe mode; the result's isolation says which."""
    try:
        launcher = detect(force_mode=mode, level="rlimits" if mode == "bwrap-user" else "unsafe")
    except SandboxUnavailable:
        pytest.skip(f"{mode} not available here")
    r = run_python(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=0.5)\n"
        "except OSError as e:\n    print(e.errno)\nprint('ran')",
        SMALL,
        launcher=launcher,
    )
    assert r.ok and r.stdout.endswith("ran\n") and r.isolation.mode == mode
    if mode == "bwrap-user":
        assert r.isolation.network and r.isolation.filesystem and r.stdout[:3] in ("101", "111")
        assert r.isolation.level == "rlimits" and "denies" in r.isolation.seccomp
    else:
        assert not r.isolation.network and "UNSAFE" in r.isolation.notes[0]
    assert run_python("while True:\n    pass", SMALL, launcher=launcher).status is Status.TIMEOUT


def test_no_bwrap_refuses_with_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: without real isolation model code is refused unless unsafe mode was asked for."""
    monkeypatch.setattr(sandbox_isolation.shutil, "which", lambda *a, **k: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as e:
        detect(allow_unsafe=False)
    assert "\n" not in str(e.value) and 'sandbox.isolation = "unsafe"' in str(e.value)
    assert detect(allow_unsafe=True).isolation.mode == "unsafe"


def test_per_process_caps_are_refused_unless_the_recipe_accepts_them_by_name() -> None:
    """Fail closed: a mode without a cgroup for all of a run's processes (an ordinary user here, or
    root without writable cgroups) is refused at the default level, with one line saying what to do."""
    with pytest.raises(SandboxUnavailable) as e:
        detect(force_mode="bwrap-user", level="strict")
    assert "\n" not in str(e.value) and 'sandbox.isolation = "rlimits"' in str(e.value)
    assert "no cgroup" in str(e.value)


def test_a_refusal_is_one_short_line_with_the_details_kept_apart() -> None:
    """The refusal a run prints is the first reason and its fix (it was ~600 characters: every mode
    tried, each with its details, and every hint); ``details`` keeps all of it for the run's sandbox.txt."""
    with pytest.raises(SandboxUnavailable) as e:
        detect(force_mode="bwrap-user", level="strict")
    line = str(e.value)
    assert len(line) <= 260 and line.count("fix:") == 1 and "no cgroup" in line, line
    details = e.value.details
    assert "no cgroup" in details and "fixes:" in details and "\n" not in line


def test_root_without_writable_cgroups_is_refused_not_weakened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root whose cgroups are read-only (a container) used to fall back to rlimits without a word."""
    if os.geteuid() != 0:
        pytest.skip("root only")
    monkeypatch.setattr(sandbox_isolation, "_cgroups", ["read-only"])  # this process found no writable cgroup
    with pytest.raises(SandboxUnavailable, match="cgroup controllers writable") as e:
        detect(force_mode="bwrap-root", level="strict")
    assert "\n" not in str(e.value) and 'sandbox.isolation = "rlimits"' in str(e.value)
    weaker = detect(force_mode="bwrap-root", level="rlimits")
    assert (weaker.isolation.level, weaker.isolation.memory_cap) == ("rlimits", "rlimit")
    assert weaker.cgroups is None
    r = run_python("print('ran')", SMALL, weaker)
    assert r.ok and r.isolation.level == "rlimits" and "isolation = rlimits" in r.isolation.header()


def test_no_seccomp_binding_refuses_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: bwrap without the seccomp filter is not offered, at any level but unsafe."""
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import pyseccomp raises ImportError
    for level in ("strict", "rlimits"):
        with pytest.raises(SandboxUnavailable, match="pyseccomp") as e:
            detect(level=level)
        assert "libseccomp2" in str(e.value) and "\n" not in str(e.value)
    assert detect(level="unsafe").isolation.mode == "unsafe"


def test_recipe_isolation_setting_is_explicit_and_checked() -> None:
    """Unsafe mode exists only as a named recipe setting (it lands in the run header with the config)."""
    from training_core.errors import BadSetting
    from training_core.hardware.platform import PlatformFacts
    from training_core.recipes import resolve

    assert resolve("code_tests", [], PlatformFacts()).config.sandbox.isolation == "strict"
    unsafe = resolve("code_tests", ["sandbox.isolation=unsafe"], PlatformFacts())
    assert unsafe.as_dict()["config"]["sandbox"]["isolation"] == "unsafe"
    rlimits = resolve("code_tests", ["sandbox.isolation=rlimits"], PlatformFacts())
    assert rlimits.config.sandbox.isolation == "rlimits"
    with pytest.raises(BadSetting):
        resolve("code_tests", ["sandbox.isolation=off"], PlatformFacts())


def test_aggregate_memory_over_the_cap_ends_with_a_reason() -> None:
    """Four children of 100 MiB each stay under RLIMIT_AS but not under the run's 256 MiB cgroup cap."""
    if not detect().isolation.memory_cap.startswith("cgroup"):
        pytest.skip("no cgroup here: memory is capped per process only (Isolation.memory_cap says so)")
    code = (
        "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        b = b'x' * (100 << 20)\n"
        "        time.sleep(2)\n        os._exit(0)\nfor _ in range(4):\n    os.wait()\n"
    )
    r = run_python(code, SandboxLimits(timeout_s=5, memory_mb=160, total_memory_mb=256, max_processes=8))
    assert r.status is Status.MEMORY_LIMIT and "256 MiB for all processes" in r.reason


def test_disk_is_the_size_of_the_private_tmpfs() -> None:
    code = "with open('big', 'wb') as f:\n    for _ in range(64):\n        f.write(b'x' * (1 << 20))\n"
    r = run_python(code, SandboxLimits(disk_mb=8, max_file_bytes=1 << 30))
    assert r.status is Status.RUNTIME_ERROR and r.reason == "disk cap: 8 MiB of tmpfs"


def test_a_run_that_cannot_join_its_cgroup_never_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: if the caps cannot be applied the program is killed before its first line."""
    launcher = detect()
    if launcher.cgroups is None:
        pytest.skip("no cgroup caps on this host")

    def refuse(slot: int, pid: int) -> None:
        raise OSError("cgroup.procs not writable")

    monkeypatch.setattr(launcher.cgroups, "join", refuse)
    r = run_python("print('ran')", SMALL, launcher)
    assert r.status is Status.KILLED and r.stdout == ""


def test_a_killed_run_is_reported_only_once_its_namespace_is_empty(marker: str) -> None:
    """On a timeout the namespace's init is killed and waited for itself: when ``run_python`` returns,
    no process of the run exists any more, with no grace period."""
    code = (
        "import os\nfor _ in range(6):\n    if os.fork() == 0:\n        os.setsid()\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\nwhile True:\n    pass\n"
    )
    r = run_python(code, SMALL)
    left = processes_with(marker)
    assert r.status is Status.TIMEOUT
    assert left == []


def test_a_run_that_exited_is_not_a_timeout_when_its_thread_looks_late() -> None:
    """The trainer's thread may be kept from running (the GIL held by a decode elsewhere) until after
    the deadline: a launcher that had already exited is drained and judged by its exit, not timed out."""
    import subprocess

    from training_core.sandbox.results import Streams, pump

    proc = subprocess.Popen(["/bin/echo", "done"], stdout=subprocess.PIPE)
    pidfd = os.pidfd_open(proc.pid)
    try:
        assert select.select([pidfd], [], [], 10)[0]  # exited (a condition, not a sleep)
        streams = Streams()
        assert proc.stdout is not None
        why = pump({proc.stdout.fileno(): streams.out}, pidfd, time.monotonic() - 1.0, 1 << 20, streams)
    finally:
        os.close(pidfd)
        proc.communicate()
    assert why == "" and bytes(streams.out) == b"done\n"


@pytest.fixture
def fds_past_1024() -> Iterator[None]:
    """A trainer with many files open: enough fds held that every new one is numbered above 1024
    (the soft RLIMIT_NOFILE raised within the hard limit for the test, then restored)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) is too low to open fds above 1024")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held: list[int] = []
    try:
        while not held or held[-1] <= 1024:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_trainer_with_over_1024_fds_open_still_runs_programs(fds_past_1024: None) -> None:
    """Waiting on pidfds above 1024 (select refuses them) must not turn every run into an error."""
    r = run_python("print('ran')", SMALL)
    assert (r.status, r.stdout) == (Status.OK, "ran\n")
    slow = run_python("while True:\n    pass\n", SMALL)
    assert slow.status is Status.TIMEOUT


def test_two_trainer_processes_never_share_a_sandbox_uid_range() -> None:
    """Each process claims its own range (an abstract socket name the kernel frees at exit): another
    process started while this one holds a range gets the next one, and sandboxes run inside it."""
    import subprocess

    from training_core.sandbox.uids import UIDS

    mine = UIDS.uid_range
    code = "from training_core.sandbox.uids import UIDS\nr = UIDS.uid_range\nprint(r.start, r.stop)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    start, stop = (int(x) for x in out.stdout.split())
    assert stop <= mine.start or start >= mine.stop, (mine, start, stop)
    launcher = detect()
    if launcher.needs_uid:
        r = run_python("import os\nprint(os.getuid())", SMALL, launcher)
        assert int(r.stdout) in mine
