"""What the SSH benchmarks share: the tests' loopback sshd hosts, the ``pippa`` entry point, timing.

Each bench is a script run from the repo (``.venv/bin/python bench/bench_X.py``), so this directory is
on sys.path and ``from _common import ...`` finds this file; tests/ goes on the path for ``sshd``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import sshd  # noqa: E402

PIPPA = str(Path(sys.prefix) / "bin" / "pippa")


def start_world(bench: str, hosts: int) -> sshd.World:
    """``hosts`` real OpenSSH hosts on loopback, or exit with why they cannot start (not root, no sshd)."""
    reason = sshd.why_unavailable()
    if reason:
        raise SystemExit(f"{bench}: {reason}")
    # These benches compare pippa with fresh OpenSSH connections, so pippa connects fresh too (no
    # connection keeper); bench_wan, which measures the keeper, takes this out of its commands' env.
    os.environ.setdefault("PIPPA_NO_REUSE", "1")
    return sshd.start_world(hosts)


def client_copy(world: sshd.World, dest: Path) -> dict[str, str]:
    """A private copy of the world's client home at ``dest`` (keys, ssh config, inventory); its env."""
    subprocess.run(["cp", "-a", str(world.client_template), str(dest)], check=True)
    return sshd.client_subprocess_env(dest)


def commit_all(repo: Path) -> None:
    """Make ``repo`` a pippa project (``tests/projects.py``: empty recipes/ and training_core/, so no
    file is added) and a git repo with everything in it committed (pippa sync sends what git tracks)."""
    from projects import make_project

    make_project(repo, git=False)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    ident = ["-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run(["git", *ident, "commit", "-qm", "synthetic"], cwd=repo, check=True)


def timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> tuple[float, str]:
    """Wall seconds of one command and its stdout; a failure ends the bench with its stderr."""
    elapsed, _cpu, out = timed_cpu(argv, env, cwd, timeout)
    return elapsed, out


def timed_cpu(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600
) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the command and the children it waited for) and
    stdout of one command. CPU is what a loaded machine barely disturbs; wall is what a user waits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu, p.stdout
