"""Shared fixtures: real OpenSSH hosts on loopback (tests/sshd.py) and a client environment for pippa.

Fixture API
-----------
``ssh_world`` (session): the ``sshd.World`` (module tests/sshd.py, importable as ``sshd``): four
hosts, started once per session.

``ssh_hosts`` (function): ``list[SSHHost]`` of that world, every one started (a test that stopped a
host gets it back); after the test, its ``~/bin`` tools, secrets.env and ``pippa doctor`` results
(``~/pippa/doctor``: a fail there refuses later runs) are gone. Per host:
  - ``name``: ``"t1"``..``"t4"``, the entry of the generated inventory (address, port, user,
    identity_file and ``python`` = the tests' venv python): pass it to pippa (``--host t1``).
  - ``ssh_alias``: ``"ssh-t1"``.., a ~/.ssh/config alias of the same host (no python set).
  - ``address`` (127.0.x.y), ``port``, ``user`` (a throw-away Unix user), ``home`` (Path, its HOME;
    its tmux server is its own), ``python``, ``host_key_line`` (its known_hosts line).
  - ``stop()`` / ``start()``: stop the listener (new connections refused) and start it again.
  - ``install_bin(name, text)``: an executable in ``~/bin``, first on the PATH of non-interactive ssh
    commands (sshd ``SetEnv PATH=~/bin:/usr/local/bin:/usr/bin:/bin``; ``~/.local/bin`` is NOT on it,
    as on a real host).
  - ``run_as_user(argv)``: run a command as that user without SSH, to set up or inspect.

``client_env`` (function): a fresh copy of the client directory for this test (edit its known_hosts
freely), as a ``ClientEnv``:
  - ``home``: the client HOME (``.ssh/{config,known_hosts,id_ed25519}``, ``.config/pippa/hosts.toml``).
  - ``vars``: HOME, XDG_CONFIG_HOME and ``PIPPA_INVENTORY`` (team inventory file, replaces the repo's
    pippa.toml; empty). ``SSH_AUTH_SOCK`` is removed.
  - ``env``: ``os.environ`` plus ``vars``, for ``subprocess.run([PIPPA, ...], env=client_env.env)``.
  - ``apply(monkeypatch)``: the same for in-process calls.
  - ``known_hosts``, ``personal_inventory``, ``team_inventory``: paths.

``ssh_env`` (function): ``client_env`` already applied to this process with monkeypatch.

``own_home`` (autouse, every test): ``PIPPA_RUN_WAIT_S=0`` (no early-exit watch after ``pippa run``
unless a test asks); HOME, XDG_CONFIG_HOME and XDG_CACHE_HOME point at an empty directory of the
test's own, so no test reads the real ``~/.config/pippa/secrets.env`` or ``~/.ssh``, or writes a
cache there. ``PIPPA_CACHE`` (the tiny model) and ``HF_HOME`` point at one directory of
the session's (``PIPPA_CACHE`` set by the caller is kept), so the tiny model is built once per run.

``PIPPA``: path of the ``pippa`` script in the venv running the tests.

``user_python`` (session): a path to the tests' venv python that a throw-away Unix user can run
(the venv's base interpreter may live under /root, mode 0700): the venv's own where it is reachable,
else a copy the session owns. No test changes the mode of a system path.

``slurm_cluster`` (session): a real single-node SLURM (module tests/slurm.py): munged, slurmctld and
slurmd started once per session; ``SLURM_CONF`` in ``slurm_cluster.env`` points the client commands at
it. Skipped with the reason where not root or the Debian packages are missing.

Tests using these carry ``@pytest.mark.ssh``; they are skipped (with the reason) only when not root or
sshd is missing. .ci/run installs openssh-server and CI runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/sshd.py, also for the benchmarks
import slurm
import sshd

# One compute thread per process unless the caller says otherwise: the suite runs one worker per core
# (pytest -n auto), and torch's default of a thread per core in every worker oversubscribes the cores,
# whose spinning threads then cost more CPU than the tests themselves.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# pytest-xdist hands its workers COLUMNS (the controller's width): pippa's tables would then fit 80
# columns under -n and 240 without. A test that cares about the width sets COLUMNS itself.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

PIPPA = str(Path(sys.prefix) / "bin" / "pippa")


def _system_paths() -> list[Path]:
    """Paths whose mode no test may change: the top of the tree and every ancestor of the interpreter."""
    paths = {Path(p) for p in ("/", "/root", "/tmp", "/home", "/usr", "/etc", "/var", "/opt", "/work")}
    for prefix in (sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)):
        paths.update(Path(prefix).parents)
    return sorted(p for p in paths if p.exists())


def _modes() -> dict[Path, int]:
    return {p: p.stat().st_mode for p in _system_paths()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_MODES] = _modes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite fails if it changed the mode of a system path: a later test (or a later run) on this
    machine must not pass only because an earlier one opened /root."""
    before = session.config.stash.get(_MODES, {})
    changed = [
        f"{p}: {oct(m)} -> {oct(p.stat().st_mode)}"
        for p, m in before.items()
        if p.exists() and p.stat().st_mode != m
    ]
    if changed:
        sys.stderr.write("tests changed the mode of system paths: " + "; ".join(changed) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_MODES = pytest.StashKey[dict[Path, int]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The order's seed, even under -q: a failure that only one order shows can be replayed."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int):
        terminalreporter.write_line(f"test order: --randomly-seed={seed} repeats it")


@dataclass
class ClientEnv:
    home: Path

    @property
    def vars(self) -> dict[str, str]:
        return sshd.client_vars(self.home)

    @property
    def env(self) -> dict[str, str]:
        return sshd.client_subprocess_env(self.home)

    @property
    def known_hosts(self) -> Path:
        return self.home / ".ssh" / "known_hosts"

    @property
    def personal_inventory(self) -> Path:
        return self.home / ".config" / "pippa" / "hosts.toml"

    @property
    def team_inventory(self) -> Path:
        return Path(self.vars["PIPPA_INVENTORY"])

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for key, value in self.vars.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture(scope="session", autouse=True)
def no_keeper_by_default() -> Iterator[None]:
    """No connection keeper for module- and session-scoped fixtures either (``own_home`` covers each
    test): a keeper outlives what started it; tests/ops/test_keeper.py asks for one."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PIPPA_NO_REUSE", "1")
    try:
        yield
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(os.environ.get("PIPPA_CACHE") or tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, session_cache: Path) -> Iterator[None]:
    """Every test gets its own empty HOME (so its own secrets.env, ~/.ssh, hosts.toml, caches): none
    reads the developer's files, and a concurrent process writing them breaks no test.
    (``client_env`` then points HOME at its client directory.)"""
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    mp.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    mp.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    mp.setenv("PIPPA_CACHE", str(session_cache))
    mp.setenv("HF_HOME", str(session_cache / "huggingface"))
    # No connection keeper (a process that outlives the test) unless a test asks for one
    # (tests/ops/test_keeper.py): a test sees its own connections come and go.
    mp.setenv("PIPPA_NO_REUSE", "1")
    # `pippa run` returns once the run is started, without its few seconds' watch for an early exit,
    # unless a test asks for the watch (tests/ops/test_cli_over_ssh.py).
    mp.setenv("PIPPA_RUN_WAIT_S", "0")
    try:
        yield
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def ssh_world() -> Iterator[sshd.World]:
    reason = sshd.why_unavailable()
    if reason:
        pytest.skip(reason)
    world = sshd.start_world(4)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture(scope="session")
def user_python() -> Iterator[str]:
    """The tests' venv as an interpreter any Unix user can run (``sshd.reachable_python``), in a
    directory of this session's, outside pytest's 0700 tree; nothing of the system changes mode."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pippa-py-"))
    os.chmod(base, 0o755)
    try:
        yield sshd.reachable_python(base / "py")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.Cluster]:
    reason = slurm.why_unavailable()
    if reason:
        pytest.skip(reason)
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pippa-slurm-"))  # outside pytest's 0700 tree: users read slurm.conf
    cluster = slurm.start_cluster(base)
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def ssh_hosts(ssh_world: sshd.World) -> Iterator[list[sshd.SSHHost]]:
    """The session's hosts, started; what a test put on a host's PATH (a fake nvidia-smi makes the
    trainer see a GPU) and the secrets it pushed (a test key would fail a later run's W&B login) are
    gone after it."""
    for h in ssh_world.hosts:
        h.start()
    yield ssh_world.hosts
    for h in ssh_world.hosts:
        for tool in (h.home / "bin").glob("*"):
            tool.unlink()
        (h.home / ".config" / "pippa" / "secrets.env").unlink(missing_ok=True)
        shutil.rmtree(h.home / "pippa" / "doctor", ignore_errors=True)  # a fail there refuses later runs
        sshd.give_back_home(h)  # a directory a test made as root (~/.config/pippa) refuses the user's writes


@pytest.fixture
def client_env(ssh_world: sshd.World, tmp_path: Path) -> ClientEnv:
    home = tmp_path / "client-home"
    shutil.copytree(ssh_world.client_template, home)
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    return ClientEnv(home)


@pytest.fixture
def ssh_env(client_env: ClientEnv, monkeypatch: pytest.MonkeyPatch) -> ClientEnv:
    client_env.apply(monkeypatch)
    return client_env


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own (root only), unmounted after it: a disk a test can fill."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
