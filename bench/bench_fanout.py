"""Fan-out benchmark: `pippa ps` over 8 loopback hosts vs over 1, measured side by side.

Each host gets a few finished runs first, so ps reads real records (one remote command per host).
The two inventories differ only in how many hosts they list (both also include ``local``). Hosts are
real sshd processes on 127.0.x.y (tests/sshd.py: root and /usr/sbin/sshd). Medians of alternating
runs. Goal (issue 2): 8 hosts <= 1.5x the time of 1.

    .venv/bin/python bench/bench_fanout.py [--hosts 8] [--runs 3] [--repeat 5]
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

from _common import PIPPA, sshd, start_world, timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3, help="finished runs per host before measuring")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    world = start_world("bench_fanout", args.hosts)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            repo.mkdir()
            (repo / "README").write_text("bench\n")
            subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
            many = Path(tmp) / "many"
            shutil.copytree(world.client_template, many)
            one = Path(tmp) / "one"
            shutil.copytree(world.client_template, one)
            inv = one / ".config" / "pippa" / "hosts.toml"
            first = world.hosts[0].name
            blocks = inv.read_text().split("[hosts.")
            inv.write_text("".join("[hosts." + b for b in blocks if b.startswith(first + "]")))
            env_many, env_one = sshd.client_subprocess_env(many), sshd.client_subprocess_env(one)
            for h in world.hosts:
                for i in range(args.runs):
                    timed(
                        [PIPPA, "run", "--host", h.name, "--name", f"b{i}", "--cmd", "echo done"],
                        env_many,
                        repo,
                    )
            time.sleep(1)
            t_one: list[float] = []
            t_many: list[float] = []
            for _ in range(args.repeat):
                t_one.append(timed([PIPPA, "ps"], env_one, repo)[0])
                elapsed, out = timed([PIPPA, "ps", "--json"], env_many, repo)
                t_many.append(elapsed)
            listed = json.loads(out)
            assert all(len(listed[h.name]["runs"]) == args.runs for h in world.hosts), listed
        o, m = statistics.median(t_one), statistics.median(t_many)
        print(f"fan-out bench: pippa ps, {args.runs} runs per host, medians of {args.repeat}")
        print(f"  1 host            {o:7.3f} s")
        print(f"  {args.hosts} hosts           {m:7.3f} s")
        print(f"  ratio {m / o:5.2f}x   goal <= 1.5x {'ok' if m / o <= 1.5 else 'MISSED'}")
    finally:
        world.close()


if __name__ == "__main__":
    os.umask(0o022)
    main()
