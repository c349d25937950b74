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
import tempfile
import time
from pathlib import Path

from _common import PIPPA, alternate, gpu_host_and_repo, print_ratios, start_world, timed

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
        env, repo = gpu_host_and_repo(world, tmp, env_drop=("PIPPA_NO_REUSE",))
        timed([PIPPA, "run", "--no-wait", "--host", h.alias, "-n", "src", "--cmd", "seq 1 50"], env, repo)
        ways = {"baseline": [args.baseline], "this": [PIPPA]}
        argvs = [[h.alias if a == "H" else a for a in c] for c in COMMANDS]
        for pippa in ways.values():
            for argv in argvs:
                subprocess.run([*pippa, *argv], env=env, cwd=repo, capture_output=True, timeout=120)
        time.sleep(3)  # the keepers connected, the warm process started
        times, cpus, bare = alternate(ways, argvs, env, repo, args.repeat)
        title = (
            f"\nwarm commands on loopback, medians of {args.repeat} (seconds); python -c pass: "
            f"{statistics.median(bare):.3f}"
        )
        print_ratios(title, argvs, times, cpus)
        print(json.dumps({"load": os.getloadavg()[0]}))
    finally:
        world.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the keepers and warm processes leave with their sockets


if __name__ == "__main__":
    os.umask(0o022)
    main()
