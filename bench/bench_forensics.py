"""Forensics of a hang are captured in seconds: an 8-process gloo run (7 ranks waiting in an all_reduce,
one that never came) dumped by ``pippa_agent.forensics.capture`` (py-spy of every process, side by side).

Goal (issue 34): <= 10 s for an 8-process run. Prints each capture's time, the median and the slowest,
and whether the suspect was the right rank each time.

    .venv/bin/python bench/bench_forensics.py [--ranks 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pippa_agent import forensics  # noqa: E402

HANG = """
import os, sys, time
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=rank, world_size=world)
open(os.path.join(sys.argv[2], f"ready-{rank}"), "w").close()
def wander_off():
    while True:
        time.sleep(0.2)
if rank == world - 1:
    wander_off()
dist.all_reduce(torch.ones(1))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "hang.py").write_text(HANG)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        job = (
            " & ".join(
                f"RANK={r} {sys.executable} {d / 'hang.py'} {port} {d} {args.ranks}"
                for r in range(args.ranks)
            )
            + " & wait"
        )
        root = subprocess.Popen(["sh", "-c", job], start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not all((d / f"ready-{r}").exists() for r in range(args.ranks)):
                if time.monotonic() > deadline:
                    raise SystemExit("the ranks did not start")
                time.sleep(0.2)
            time.sleep(2.0)
            times, right = [], 0
            for n in range(args.repeats):
                t0 = time.perf_counter()
                summary = forensics.capture(str(d), n + 1, root.pid)
                times.append(time.perf_counter() - t0)
                right += summary["suspect"]["rank"] == args.ranks - 1  # type: ignore[index]
        finally:
            os.killpg(root.pid, 9)
            root.wait()
    print(f"{args.ranks} processes: capture " + ", ".join(f"{t:.2f}s" for t in times))
    print(
        f"median {statistics.median(times):.2f}s, slowest {max(times):.2f}s (goal <= 10 s); "
        f"suspect right {right}/{args.repeats}"
    )


if __name__ == "__main__":
    main()
