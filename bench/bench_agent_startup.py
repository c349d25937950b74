"""Host agent start-up: one cached request through the real bootstrap, as the host ``local`` runs it
(``python3 -S -I -c BOOTSTRAP`` with the request on stdin), wall and CPU (the child's rusage).

Compare two trees side by side by running it once per tree in alternation, e.g. against the commit
before the agent became a package (``git archive <commit> pippa_ops | tar -x -C /tmp/base``):

    PYTHONPATH=/tmp/base .venv/bin/python bench/bench_agent_startup.py 40 run_checkpoints
    .venv/bin/python bench/bench_agent_startup.py 40 run_checkpoints

``run_checkpoints`` starts no subprocess (start-up alone); ``list_runs`` adds ``tmux list-sessions``.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from pippa_ops.transport import agent_client
from pippa_ops.transport.base import LocalTransport


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    verb = sys.argv[2] if len(sys.argv) > 2 else "run_checkpoints"
    home, remote = tempfile.mkdtemp(), tempfile.mkdtemp()
    os.makedirs(remote + "/runs")
    args = {"remote_dir": remote, "run_id": "x"} if verb == "run_checkpoints" else {"remote_dir": remote}
    request = json.dumps({"verb": verb, "args": args}).encode()
    argv = shlex.split(agent_client.command(LocalTransport()))
    env = {**os.environ, "HOME": home}

    def once() -> tuple[bytes, float, float]:
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"%d\n" % len(request) + request)
        p.stdin.flush()
        status = p.stdout.read(1)
        if status == b"?":  # the first run fills the cache
            p.stdin.write(agent_client.frame(agent_client.program()))
            p.stdin.flush()
        p.stdin.close()
        p.stdout.read()
        _, _, usage = os.wait4(p.pid, 0)
        return status, (time.perf_counter() - t) * 1000, (usage.ru_utime + usage.ru_stime) * 1000

    once()
    walls, cpus = [], []
    for _ in range(n):
        status, wall, cpu = once()
        assert status == b"+", status
        walls.append(wall)
        cpus.append(cpu)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"{verb}: wall median {wall:.2f} ms, cpu median {cpu:.2f} ms (n={n})")


if __name__ == "__main__":
    main()
