"""What the SSH benchmarks share: the tests' loopback sshd hosts, the ``pippa`` entry point, timing.

Each bench is a script run from the repo (``.venv/bin/python bench/bench_X.py``), so this directory is
on sys.path and ``from _common import ...`` finds this file; tests/ goes on the path for ``sshd``.
"""

from __future__ import annotations

import os
import resource
import statistics
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


def gpu_host_and_repo(world: sshd.World, tmp: Path, env_drop: tuple[str, ...]) -> tuple[dict[str, str], Path]:
    """The world's first host given a fake nvidia-smi (2 GPUs); a private client home under ``tmp`` and
    its env (less ``env_drop``, a runtime dir and bytecode cache under ``tmp``: neither tree is written);
    a committed one-file repo to run from."""
    h = world.hosts[0]
    sys.path.insert(0, str(ROOT / "tests" / "dash"))
    import fake_smi

    h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
    env = {
        k: v
        for k, v in client_copy(world, tmp / "client").items()
        if k not in ("SSH_AUTH_SOCK", "PYTHONDONTWRITEBYTECODE", *env_drop)
    }
    env.update(PIPPA_RUNTIME_DIR=str(tmp / "run"), PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    commit_all(repo)
    return env, repo


Samples = dict[tuple[str, str], list[float]]


def alternate(
    ways: dict[str, list[str]], argvs: list[list[str]], env: dict[str, str], repo: Path, repeat: int
) -> tuple[Samples, Samples, list[float]]:
    """Each command by each pippa (``ways``: name -> the argv before the command), ``repeat``
    rounds, which goes first swapping every round (the second of a pair ran measurably slower): wall
    and CPU seconds per (command, way), and ``python -c pass``'s wall per round."""
    times: Samples = {}
    cpus: Samples = {}
    bare = []
    for i in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t0)
        order = list(ways.items()) if i % 2 == 0 else list(reversed(ways.items()))
        for argv in argvs:
            for way, pippa in order:
                wall, cpu, _ = timed_cpu([*pippa, *argv], env, repo)
                times.setdefault((" ".join(argv), way), []).append(wall)
                cpus.setdefault((" ".join(argv), way), []).append(cpu)
    return times, cpus, bare


def print_ratios(title: str, argvs: list[list[str]], times: Samples, cpus: Samples, goal: str = "") -> None:
    """Per command: the medians of wall and CPU, the baseline's and this one's, and their ratios."""
    print(title)
    for argv in argvs:
        k = " ".join(argv)
        b, t = statistics.median(times[(k, "baseline")]), statistics.median(times[(k, "this")])
        bc, tc = statistics.median(cpus[(k, "baseline")]), statistics.median(cpus[(k, "this")])
        print(
            f"  {k:24} wall baseline {b:.3f}   this {t:.3f}   {t / b:.2f}x"
            f"   cpu baseline {bc:.3f}   this {tc:.3f}   {tc / bc:.2f}x{goal}"
        )
