"""Instant commands: warm hot verbs on loopback, this checkout's pippa against another's, side by side.

One loopback sshd host (tests/sshd.py) with a fake nvidia-smi and one finished run; the commands are
ps, logs, gpus, two with no network, a launch (``run --no-wait --cmd true``) and a no-change sync; each is
run once by each pippa to warm its connection keeper (and this checkout's warm process), then both are
timed alternately ``--repeat`` times (which goes first swaps every round), medians of wall and CPU
seconds (the command's own user + system, which a loaded machine disturbs less) printed with
``python -c pass`` for the interpreter's own start.
On loopback the network costs almost nothing, so this is what a warm command costs locally.
Bytecode is cached under the bench's temporary directory (neither tree is written).

    .venv/bin/python bench/bench_instant.py --baseline /path/to/other/checkout/.venv/bin/pippa [--repeat 11]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PIPPA, ROOT, commit_all, start_world, timed, timed_cpu

COMMANDS = (
    ["ps", "--host", "H"],
    ["logs", "--host", "H"],
    ["gpus", "H", "--json"],
    ["ps", "--help"],
    ["--version"],
    ["run", "--no-wait", "--host", "H", "--cmd", "true"],  # a new run each time (the repo: no change)
    ["sync", "H"],  # no change
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other checkout's bin/pippa")
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    world = start_world("bench_instant", 1)
    tmp = Path(tempfile.mkdtemp(prefix="bi"))
    try:
        h = world.hosts[0]
        sys.path.insert(0, str(ROOT / "tests" / "dash"))
        import fake_smi

        h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
        client = tmp / "client"
        subprocess.run(["cp", "-a", str(world.client_template), str(client)], check=True)
        import sshd

        env = {
            k: v
            for k, v in sshd.client_subprocess_env(client).items()
            if k not in ("SSH_AUTH_SOCK", "PIPPA_NO_REUSE", "PYTHONDONTWRITEBYTECODE")
        }
        env.update(PIPPA_RUNTIME_DIR=str(tmp / "run"), PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
        repo = tmp / "repo"
        repo.mkdir()
        (repo / "a.py").write_text("x = 1\n")
        commit_all(repo)
        timed([PIPPA, "run", "--no-wait", "--host", h.alias, "-n", "src", "--cmd", "seq 1 50"], env, repo)
        ways = {"baseline": args.baseline, "this": PIPPA}
        argvs = [[h.alias if a == "H" else a for a in c] for c in COMMANDS]
        for pippa in ways.values():
            for argv in argvs:
                subprocess.run([pippa, *argv], env=env, cwd=repo, capture_output=True, timeout=120)
        time.sleep(3)  # the keepers connected, the warm process started
        times: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        bare = []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.perf_counter() - t0)
            # which pippa goes first swaps every round: the second of a pair ran measurably slower
            order = list(ways.items()) if i % 2 == 0 else list(reversed(ways.items()))
            for argv in argvs:
                for way, pippa in order:
                    wall, cpu, _ = timed_cpu([pippa, *argv], env, repo)
                    times.setdefault((" ".join(argv), way), []).append(wall)
                    cpus.setdefault((" ".join(argv), way), []).append(cpu)
        print(
            f"\nwarm commands on loopback, medians of {args.repeat} (seconds); python -c pass: "
            f"{statistics.median(bare):.3f}"
        )
        for argv in argvs:
            k = " ".join(argv)
            b, t = statistics.median(times[(k, "baseline")]), statistics.median(times[(k, "this")])
            bc, tc = statistics.median(cpus[(k, "baseline")]), statistics.median(cpus[(k, "this")])
            print(
                f"  {k:24} wall baseline {b:.3f}   this {t:.3f}   {t / b:.2f}x"
                f"   cpu baseline {bc:.3f}   this {tc:.3f}   {tc / bc:.2f}x"
            )
        print(json.dumps({"load": os.getloadavg()[0]}))
    finally:
        world.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the keepers and warm processes leave with their sockets


if __name__ == "__main__":
    os.umask(0o022)
    main()
