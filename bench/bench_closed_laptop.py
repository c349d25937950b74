"""What the closed laptop's host-side pieces cost the trainer: the tiny recipe with and without them.

"With" runs, beside the trainer, one process that does what the host's watcher and supervisor add for
issue 43, as often as the tests make them (far more often than the defaults): the heartbeat's ``tick``
every ``--every`` seconds (its progress check of the run directory, a POST to a loopback HTTP server),
the stop command's ``tick`` (``done``/``idle`` bookkeeping and the checkpoint-save scan), the daily
budget's spend since midnight, and the run's budget check (the goodput ledger over attempts.json) every
0.5 s (the supervisor's poll). The real watcher also lists tmux sessions each loop; this process does
not (it watches a plain ``training_core.train`` run, not a tmux one). Each pair runs back to back, in
alternating order, and the script prints each run's training time (first step to the end line), the
ratio of the medians (with / without; the target is <= 1.02), and that process's CPU as a share of one
core (its user + system time over its wall time).

    .venv/bin/python bench/bench_closed_laptop.py [--pairs 3] [--steps 60] [--every 1]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "ops"))

SIDE = r"""
import json, os, sys, time
from pippa_agent.alerts.heartbeat import Heartbeat, Sender
from pippa_agent.alerts.stopper import Stopper
from pippa_agent.alerts.daily import check_daily
from pippa_agent.supervise.budget import Budget
runs, run_id, url, every = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
os.makedirs(os.path.expanduser("~/.config/pippa/alerts"), exist_ok=True)
beat = Heartbeat(Sender(url, os.devnull), every, False, runs, "bench")
cfg = {"stop_command": "true", "stop_when": ["done", "idle:1800"], "stop_notice_s": 300, "host": "bench",
       "daily_budget": 1e9, "remote_dir": os.path.dirname(runs)}
stop = Stopper(cfg, runs, lambda *a: None)
budget = Budget(1e9, "$")
doc_path = os.path.join(runs, run_id, "attempts.json")
next_beat = 0.0
while not os.path.exists(os.path.join(runs, run_id, "done")):
    now = time.time()
    try:
        doc = json.load(open(doc_path))
    except (OSError, ValueError):
        doc = {"attempts": []}
    budget.check(doc, now, os.path.join(runs, run_id))
    if now >= next_beat:
        beat.tick(now, [run_id])
        stop.tick(now, [run_id], [50.0])
        check_daily(cfg, [run_id], now, lambda *a: None)
        next_beat = now + every
    time.sleep(0.5)
t = os.times()
print(json.dumps({"cpu_s": t.user + t.system, "sent": beat.sender.sent}))
"""


def one_run(steps: int, tmp: Path, tag: str, side: bool, url: str, every: float) -> dict[str, float]:
    runs = tmp / "pippa" / "runs"
    run_id = f"bench-{tag}"
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    doc = {"attempts": [{"attempt": 1, "start": time.time(), "end": None, "price_s": 0.001}]}
    (run_dir / "attempts.json").write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    helper = None
    t0 = time.monotonic()
    if side:
        side_argv = [sys.executable, "-c", SIDE, str(runs), run_id, url, str(every)]
        helper = subprocess.Popen(
            side_argv, cwd=ROOT, env={**env, "HOME": str(tmp)}, stdout=subprocess.PIPE, text=True
        )
    argv = [sys.executable, "-m", "training_core.train", "tiny", "--run-dir", str(run_dir)]
    for s in [
        "seed=0",
        "checkpoint.every=0",
        "logging.progress=false",
        f"train.max_steps={steps}",
        "eval.interval=100000",
    ]:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("bench_closed_laptop: the run failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    (run_dir / "done").write_text("")
    out: dict[str, float] = {}
    if helper is not None:
        said = json.loads((helper.communicate(timeout=60)[0] or "{}").strip().splitlines()[-1])
        wall = time.monotonic() - t0
        out = {"cpu_share": said["cpu_s"] / wall, "pings": said["sent"]}
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps_ = [r for r in recs if r["type"] == "step"]
    out["train_s"] = recs[-1]["time"] - steps_[0]["time"] + steps_[0]["perf/step_time_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=float, default=1.0, help="heartbeat_every, s (60 on a host by default)")
    args = p.parse_args()
    import webhook

    print(
        f"cpu: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; tiny recipe, "
        f"{args.steps} steps, heartbeat every {args.every:g}s"
    )
    with webhook.serve() as hook, tempfile.TemporaryDirectory(prefix="bench-closed-") as tmp:
        url = f"http://{hook.address}:{hook.port}/ping/bench"
        without: list[float] = []
        with_: list[float] = []
        shares: list[float] = []
        for i in range(args.pairs):
            for side in (False, True) if i % 2 == 0 else (True, False):
                r = one_run(args.steps, Path(tmp), f"{i}-{int(side)}", side, url, args.every)
                (with_ if side else without).append(r["train_s"])
                if side:
                    shares.append(r["cpu_share"])
                extra = ""
                if side:
                    extra = f"  side process {100 * r['cpu_share']:.2f}% of a core, {r['pings']:.0f} pings"
                what = "with   " if side else "without"
                print(f"pair {i}  {what}  train {r['train_s']:.2f}s{extra}", flush=True)
    ratio = statistics.median(with_) / statistics.median(without)
    print(
        f"median train time: without {statistics.median(without):.2f}s, with "
        f"{statistics.median(with_):.2f}s: ratio {ratio:.3f} (target <= 1.02); side process CPU median "
        f"{100 * statistics.median(shares):.2f}% of a core (target <= 0.5%)"
    )


if __name__ == "__main__":
    main()
