"""Benchmark of ``pippa dash``: CPU use while following 4 hosts at 1 Hz, and sample latency.

Run as root (it starts 4 real OpenSSH hosts on loopback with tests/sshd.py):

    .venv/bin/python bench/bench_dash.py [--seconds 60] [--hosts 4]

Each host's nvidia-smi (tests/dash/fake_smi.py, a real H100 capture replayed with ``-l 1``) writes
its print time into the GPU uuid. The dashboard runs in-process (Textual's headless driver: the whole
app, layout and rendering, minus the terminal writes) with the same monitors ``pippa dash`` builds.
CPU: process CPU time (all threads: the SSH loop, workers, the app) over the measuring window, once every
host is up. Latency: from the sample's print time on the host to the moment the app drew that state.
Both are printed with their ratio to the goals (≤ 5% of one core, p95 ≤ 1.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

from _common import ROOT, sshd, start_world

sys.path.insert(0, str(ROOT / "tests" / "dash"))
import fake_smi

from pippa_ops.dash.app import DashApp
from pippa_ops.hosts.inventory import resolve
from pippa_ops.monitor.host import HostMonitor

CPU_GOAL = 5.0  # % of one core
LATENCY_GOAL_S = 1.5  # p95


class ProbedApp(DashApp):
    """The dashboard, recording when each host's stamped sample reached the drawn state."""

    latencies: list[float]
    measuring = False

    def _draw_host(self, host: str) -> None:
        super()._draw_host(host)
        gpus = self.states[host].gpus
        if self.measuring and gpus and gpus[0].reading.uuid and gpus[0].reading.uuid.startswith("GPU-"):
            stamp = float(gpus[0].reading.uuid[4:])
            if stamp != getattr(self, f"_seen_{host}", None):
                setattr(self, f"_seen_{host}", stamp)
                self.latencies.append(time.time() - stamp)


async def measure(names: list[str], seconds: float) -> tuple[float, list[float]]:
    monitors = {n: HostMonitor(resolve(n), interval_s=1.0) for n in names}
    app = ProbedApp(names, monitors)
    app.latencies = []
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + 60
        while not all(app.states[n].gpus for n in names):
            if time.monotonic() > deadline:
                raise SystemExit(f"hosts did not come up within 60 s: {app.states}")
            await pilot.pause(0.2)
        await asyncio.sleep(2.0)  # let the first run-list polls land
        app.measuring = True
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        app.measuring = False
    return 100.0 * cpu / wall, app.latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--hosts", type=int, default=4)
    args = ap.parse_args()
    world = start_world("bench_dash", args.hosts)
    try:
        os.environ.update(sshd.client_vars(world.client_template))
        os.environ.pop("SSH_AUTH_SOCK", None)
        for h in world.hosts:
            h.install_bin("nvidia-smi", fake_smi.script(gpus=2, stamp=True, python=h.python))
        names = [h.name for h in world.hosts]
        cpu_pct, lat = asyncio.run(measure(names, args.seconds))
    finally:
        world.close()
    lat.sort()
    p50 = statistics.median(lat) if lat else float("nan")
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan")
    print(f"pippa dash, {args.hosts} hosts x 2 GPUs at 1 Hz, {args.seconds:.0f} s, {len(lat)} samples drawn")
    print(f"CPU: {cpu_pct:.2f}% of one core   (goal <= {CPU_GOAL}%: ratio {cpu_pct / CPU_GOAL:.2f})")
    print(
        f"latency host sample -> drawn state: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {lat[-1] * 1000 if lat else float('nan'):.0f} ms   "
        f"(goal p95 <= {LATENCY_GOAL_S} s: ratio {p95 / LATENCY_GOAL_S:.2f})"
    )


if __name__ == "__main__":
    main()
