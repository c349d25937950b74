"""Cold direct commands: this checkout's pippa against another's, side by side, each on a fresh SSH
connection of its own (``--no-reuse``: no keeper, no warm process).

One loopback sshd host (tests/sshd.py) with a fake nvidia-smi; the commands are ``ps --host H`` and a
``sync H`` of an unchanged repo, each paying the whole cold path: the interpreter, the imports, the
TCP connect, the key exchange and authentication, the host agent's answer. Each pippa runs each
command once first (the host then has both agent bundles and the synced tree), then both are timed
alternately ``--repeat`` times, A B A B (which goes first swaps every round); medians of wall and CPU
seconds (the command's own user + system) printed with their ratio. Bytecode is cached under the
bench's temporary directory (neither tree is written).

With ``--baseline-tree``, where that time goes is then split in-process, each tree in a fresh
interpreter of this venv, alternated the same way: the import of the transport (``hosts.connect`` and
``transport.ssh``, the SSH library with it), the connect and first command, a second command on the
same connection.

    git archive main | tar -x -C /tmp/pippa-main   # the baseline tree, run with this venv's python
    .venv/bin/python bench/bench_cold.py --baseline-tree /tmp/pippa-main [--repeat 11]
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
from pathlib import Path

from _common import PIPPA, ROOT, alternate, gpu_host_and_repo, print_ratios, start_world, timed_cpu

COMMANDS = (["ps", "--host", "H"], ["sync", "H"])


def _launcher(tree: Path, dest: Path) -> str:
    """An executable that runs pippa from ``tree`` with this interpreter (its packages, that tree's code)."""
    dest.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(tree)!r})\n"
        "from pippa_ops.cli.app import main\nsys.exit(main())\n"
    )
    dest.chmod(0o755)
    return str(dest)


_SPLIT = r"""
import sys, time
sys.path.insert(0, TREE)
t0, c0 = time.perf_counter(), time.process_time()
from pippa_ops.hosts.connect import connect
import pippa_ops.transport.ssh
spec, t = connect(NAME)
t1, c1 = time.perf_counter(), time.process_time()
t.run("true", check=True)
t2, c2 = time.perf_counter(), time.process_time()
t.run("true", check=True)
t3, c3 = time.perf_counter(), time.process_time()
print(t1 - t0, c1 - c0, t2 - t1, c2 - c1, t3 - t2, c3 - c2)
"""
PARTS = ("import", "connect + 1st command", "2nd command")


def split(trees: dict[str, Path], name: str, env: dict[str, str], cwd: Path, repeat: int) -> None:
    """Medians of wall and CPU seconds of each part (PARTS) of a direct command, per tree, in-process."""
    got: dict[tuple[str, int], list[float]] = {}
    for i in range(repeat):
        order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
        for way, tree in order:
            code = _SPLIT.replace("TREE", repr(str(tree))).replace("NAME", repr(name))
            p = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{way}: {p.stderr}")
            for j, v in enumerate(float(x) for x in p.stdout.split()):
                got.setdefault((way, j), []).append(v)
    print(f"\nin-process, medians of {repeat} (seconds, wall / cpu):")
    for j, part in enumerate(PARTS):
        b = [statistics.median(got[("baseline", 2 * j + k)]) for k in (0, 1)]
        t = [statistics.median(got[("this", 2 * j + k)]) for k in (0, 1)]
        print(
            f"  {part:24} baseline {b[0]:.3f} / {b[1]:.3f}   this {t[0]:.3f} / {t[1]:.3f}"
            f"   {t[0] / b[0]:.2f}x / {t[1] / b[1]:.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--baseline", help="the other checkout's bin/pippa")
    group.add_argument("--baseline-tree", type=Path, help="the other checkout's source tree")
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    world = start_world("bench_cold", 1)
    tmp = Path(tempfile.mkdtemp(prefix="bc"))
    try:
        h = world.hosts[0]
        env, repo = gpu_host_and_repo(world, tmp, env_drop=())
        env["PIPPA_NO_REUSE"] = "1"
        baseline = args.baseline or _launcher(args.baseline_tree.resolve(), tmp / "pippa-baseline")
        ways = {"baseline": [baseline, "--no-reuse"], "this": [PIPPA, "--no-reuse"]}
        argvs = [[h.alias if a == "H" else a for a in c] for c in COMMANDS]
        for pippa in ways.values():
            for argv in argvs:
                timed_cpu([*pippa, *argv], env, repo)  # the host has its bundle and tree
        times, cpus, bare = alternate(ways, argvs, env, repo, args.repeat)
        title = (
            f"\ncold direct commands on loopback (--no-reuse), medians of {args.repeat} (seconds); "
            f"python -c pass: {statistics.median(bare):.3f}"
        )
        print_ratios(title, argvs, times, cpus, goal="   (goal <= 1.1x)")
        if args.baseline_tree:
            split({"baseline": args.baseline_tree.resolve(), "this": ROOT}, h.alias, env, repo, args.repeat)
        print(json.dumps({"load": os.getloadavg()[0]}))
    finally:
        world.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.umask(0o022)
    main()
