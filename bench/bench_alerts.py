"""Alerts: what the idle-GPU watcher costs the host, and how long an alert takes from the event to the
HTTP request.

    .venv/bin/python bench/bench_alerts.py [--polls 40] [--hooks 30] [--runs 5] [--smi PATH]

1. Watcher CPU. The watcher (the host program's ``alerts watch``, pippa_agent/alerts/watch.py) runs
   with a short idle period so it polls every 0.5 s; its CPU (its own and its children's, nvidia-smi
   included: /proc/PID/stat utime+stime+cutime+cstime) over ``--polls`` polls gives the CPU of one
   poll, and that over the poll interval a setting uses (idle_alert = "20m": every 60 s) is its share
   of one core. Also printed: the
   share measured directly at the 0.5 s interval (the worst case). ``--smi`` names the nvidia-smi to
   poll (default: a fake one printing two GPUs at 0%; on a GPU host pass the real one).
2. Alert latency, on a real loopback sshd host (tests/sshd.py) set up with ``pippa up`` and
   PIPPA_NOTIFY pointed at an HTTP server on loopback: from a run's exit_code (the event) to the
   request, for ``--runs`` real runs (``pippa run --cmd true``), and for ``--hooks`` calls of the run's
   end line itself on an ended run (event time: the call).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PIPPA, ROOT, client_copy, start_world

sys.path.insert(0, str(ROOT / "tests" / "ops"))
sys.path.insert(0, str(ROOT / "tests"))
import webhook
from hostprogram import install

FAKE_SMI = "#!/bin/sh\ncase \"$1\" in -L) echo 'GPU 0: Fake'; echo 'GPU 1: Fake';; *) echo 0; echo 0;; esac\n"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The process's CPU seconds, its waited-for children's included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def watcher_cpu(polls: int, smi: str | None) -> None:
    with tempfile.TemporaryDirectory() as home:
        alerts = Path(home) / ".config" / "pippa" / "alerts"
        alerts.mkdir(parents=True)
        bin_dir = Path(home) / "bin"
        bin_dir.mkdir()
        if smi is None:
            (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
            (bin_dir / "nvidia-smi").chmod(0o755)
        else:
            (bin_dir / "nvidia-smi").symlink_to(smi)
        (alerts / "config.json").write_text(
            json.dumps({"host": "bench", "remote_dir": home, "idle_alert_s": 5.0})
        )
        env = {**os.environ, "HOME": home, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        prog = install(Path(home))  # the host program, as the bootstrap stores it
        argv = ["python3", "-S", "-I", str(prog), "alerts", "watch"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        state = alerts / "watch.json"
        try:
            deadline = time.monotonic() + 10
            while not state.exists() or "sample_time" not in state.read_text():  # its first sample
                assert time.monotonic() < deadline, "the watcher did not start"
                time.sleep(0.05)
            c0, t0 = cpu_s(proc.pid), time.monotonic()
            first = json.loads(state.read_text())["sample_time"]
            last = first
            seen = 0
            while seen < polls:
                time.sleep(0.1)
                try:
                    now = json.loads(state.read_text())["sample_time"]
                except (ValueError, OSError):
                    continue
                if now != last:
                    seen, last = seen + 1, now
            c1, t1 = cpu_s(proc.pid), time.monotonic()
        finally:
            proc.terminate()
            proc.wait(10)
    per_poll = (c1 - c0) / polls
    which = "fake" if smi is None else smi
    print(
        f"watcher: {polls} polls in {t1 - t0:.1f}s, {c1 - c0:.3f} CPU-s:"
        f" {per_poll * 1000:.1f} ms CPU per poll (nvidia-smi: {which})"
    )
    print(f"watcher: {100 * (c1 - c0) / (t1 - t0):.2f}% of one core polling every 0.5 s (idle_alert <= 5s)")
    print(f'watcher: {100 * per_poll / 60:.3f}% of one core at idle_alert = "20m" (a poll every 60 s)')


def latency(runs: int, hooks: int) -> None:
    world = start_world("bench_alerts", 1)
    try:
        h = world.hosts[0]
        with tempfile.TemporaryDirectory() as tmp, webhook.serve() as hook:
            env = client_copy(world, Path(tmp) / "client")
            inv = Path(env["XDG_CONFIG_HOME"]) / "pippa" / "hosts.toml"
            inv.write_text(
                inv.read_text().replace(
                    f"[hosts.{h.name}]\n", f"[hosts.{h.name}]\nsetup = []\nsecrets = []\n"
                )
            )
            repo = Path(tmp) / "repo"
            repo.mkdir()
            (repo / ".gitignore").write_text(".env\n")
            (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url('bench-token')}\n")
            subprocess.run(["git", "init", "-q", str(repo)], check=True)

            def pippa(*args: str) -> str:
                p = subprocess.run(
                    [PIPPA, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120
                )
                if p.returncode != 0:
                    raise SystemExit(f"pippa {' '.join(args)}: {p.stderr}")
                return p.stdout

            pippa("up", h.name)
            run_lat = []
            run_dir = None
            for _ in range(runs):
                out = pippa("run", "--host", h.name, "--name", "bench-alert", "--cmd", "true")
                rid = next(line.split()[1] for line in out.splitlines() if line.startswith("started "))
                post = hook.wait_for(lambda p, rid=rid: f"run: {rid}" in p.json["message"], timeout=60)
                run_dir = h.home / "pippa" / "runs" / rid
                run_lat.append(post.received - (run_dir / "exit_code").stat().st_mtime)
            hook_lat = []
            assert run_dir is not None
            for _ in range(hooks):
                n = len(hook.posts)
                t0 = time.time()
                prog = str(h.home / ".config/pippa/alerts/agent.pyz")
                h.run_as_user(
                    ["python3", "-S", "-I", prog, "alerts", "event", "--run-dir", str(run_dir), "--detach"]
                )
                post = hook.wait_for(lambda p, n=n: hook.posts.index(p) >= n, timeout=60)
                hook_lat.append(post.received - t0)
        for name, xs in (
            ("real runs (exit_code -> request)", run_lat),
            ("run-end line (call -> request)", hook_lat),
        ):
            xs = sorted(xs)
            p95 = xs[max(0, round(0.95 * len(xs)) - 1)]
            print(
                f"alert latency, {name}: n={len(xs)} median {statistics.median(xs):.2f}s p95 {p95:.2f}s "
                f"max {xs[-1]:.2f}s"
            )
    finally:
        world.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=40)
    ap.add_argument("--hooks", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--smi", default=None, help="the nvidia-smi to poll (default: a fake one)")
    ap.add_argument("--cpu-only", action="store_true", help="only the watcher's CPU (no sshd needed)")
    args = ap.parse_args()
    watcher_cpu(args.polls, args.smi)
    if not args.cpu_only:
        latency(args.runs, args.hooks)


if __name__ == "__main__":
    main()
