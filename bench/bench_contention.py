"""The CPU-contention timing channel between two concurrent sandboxes, measured: its bandwidth.

What the sandbox leaves open by physics (docs/sandbox.md, "What remains"): a sender sandbox keeps the
CPUs busy (one bit = one slot of ``--slot`` seconds, busy for 1, idle for 0) while a receiver sandbox
counts how far its own loop gets in each slot; slots are aligned on the wall clock, which both read.
The receiver's counts are decoded with their median as the threshold; the bit error rate ``p`` gives
the channel's capacity as a binary symmetric channel, ``(1 - H(p)) / slot`` bits per second.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_contention.py [--bits 64] [--slot 0.1] [--threads 4]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor

from training_core.sandbox import SandboxLimits, detect, run_python

SENDER = """
import threading, time
BITS, SLOT, START = {bits}, {slot}, {start}
def spin(i):
    while time.time() < START + i * SLOT + SLOT:
        pass
def one(i):
    ts = [threading.Thread(target=spin, args=(i,)) for _ in range({threads})]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
while time.time() < START:
    time.sleep(0.001)
for i, b in enumerate(BITS):
    if b:
        one(i)
    else:
        time.sleep(max(0.0, START + (i + 1) * SLOT - time.time()))
"""

RECEIVER = """
import time
N, SLOT, START = {n}, {slot}, {start}
while time.time() < START:
    time.sleep(0.001)
counts = []
for i in range(N):
    end, c = START + (i + 1) * SLOT, 0
    while time.time() < end:
        c += 1
    counts.append(c)
print(' '.join(map(str, counts)))
"""


def entropy(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=64)
    ap.add_argument("--slot", type=float, default=0.1, help="seconds per bit")
    ap.add_argument("--threads", type=int, default=4, help="the sender's busy threads")
    args = ap.parse_args()
    launcher = detect()
    print(launcher.isolation.header()[:160])
    bits = [random.SystemRandom().getrandbits(1) for _ in range(args.bits)]
    start = math.ceil(time.time()) + 2.0
    limits = SandboxLimits(timeout_s=args.bits * args.slot + 10, max_processes=args.threads + 8)
    with ThreadPoolExecutor(2) as ex:
        sender = SENDER.format(bits=bits, slot=args.slot, start=start, threads=args.threads)
        fs = ex.submit(run_python, sender, limits, launcher)
        fr = ex.submit(
            run_python, RECEIVER.format(n=args.bits, slot=args.slot, start=start), limits, launcher
        )
        sent, got = fs.result(), fr.result()
    assert sent.ok and got.ok, (sent.stderr[-300:], got.stderr[-300:])
    counts = [int(x) for x in got.stdout.split()]
    threshold = sorted(counts)[len(counts) // 2]
    decoded = [int(c < threshold) for c in counts]  # a busy sender slows the receiver: fewer loops
    p = sum(a != b for a, b in zip(bits, decoded, strict=True)) / len(bits)
    capacity = max(0.0, 1 - entropy(min(p, 1 - p))) / args.slot
    print(
        f"{args.bits} bits at {args.slot * 1000:.0f} ms a bit, sender {args.threads} threads: "
        f"bit error rate {p:.2f}, capacity {capacity:.1f} bits/s"
    )


if __name__ == "__main__":
    main()
