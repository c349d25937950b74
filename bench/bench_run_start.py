"""Run-start benchmark: how soon after a healthy recipe's first line `pippa run` returns, against
`pippa run --no-wait` plus polling by hand (`pippa ps --json` once a second until the run shows a step).

`pippa run` watches the start (pippa_ops.runs.launching.startup) until the trainer writes its first line (the
metrics header, after imports and the model's load) and returns. By hand, a user starts it with
--no-wait and looks with `pippa ps` until it has a step. Both run the tiny recipe with the real
trainer on one loopback host (tests/sshd.py), alternately, ``--repeat`` times; the lag is the
return (or the poll that saw it) minus the time in the run's first metrics line, the header, and
minus its first step line (same clock: loopback). Goal (issue 32): `pippa run` returns within 1 s
of the first step line.

    .venv/bin/python bench/bench_run_start.py [--repeat 3]

2026-11-26, a 2-core machine shared with other work (load average ~12), medians of 3: `pippa run`
returned 0.36 s after the run's header and 11.7 s before its first step line (the first tiny step
is slow on that CPU); --no-wait + `pippa ps` once a second saw the run 18.5 s after the header,
1.46 s after its first step line.
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

from _common import PIPPA, client_copy, commit_all, start_world

REPO = Path(__file__).resolve().parents[1]


def project(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "training_core", dest / "training_core", ignore=ignore)
    (dest / "recipes").mkdir()
    for name in ("base.toml", "tiny.toml"):
        shutil.copy(REPO / "recipes" / name, dest / "recipes")
    commit_all(dest)


def first_lines(metrics: Path, deadline_s: float = 300) -> tuple[float, float]:
    """(time of the header, time of the first step line), waiting for the step line to be written."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if metrics.exists():
            recs = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.endswith("}")]
            step = next((r for r in recs if r.get("type") == "step"), None)
            if recs and step is not None:
                return float(recs[0]["time"]), float(step["time"])
        time.sleep(0.2)
    raise SystemExit(f"no step line in {metrics}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    world = start_world("bench_run_start", 1)
    host = world.hosts[0]
    rows: dict[str, list[tuple[float, float]]] = {"pippa run": [], "--no-wait + ps by hand": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "proj"
            project(repo)
            client = Path(tmp) / "client"
            env = client_copy(world, client)
            inv = client / ".config" / "pippa" / "hosts.toml"
            head = f"[hosts.{host.name}]\n"
            offline = 'env = { PIPPA_PLATFORM_OFFLINE = "1" }\n'  # no model hub here: no probe of it
            inv.write_text(inv.read_text().replace(head, head + offline, 1))
            env.pop("PIPPA_RUN_WAIT_S", None)

            def pippa(*a: str) -> subprocess.CompletedProcess[str]:
                p = subprocess.run(
                    [PIPPA, *a], env=env, cwd=repo, capture_output=True, text=True, timeout=400
                )
                if p.returncode != 0:
                    raise SystemExit(f"pippa {' '.join(a)} failed: {p.stderr}")
                return p

            pippa("sync", host.name)  # the host is ready: the bench is about the start, not the first sync
            for i in range(args.repeat):
                for how in rows:
                    name = f"b{i}{'w' if how == 'pippa run' else 'n'}"
                    more = ["--wait", "120"] if how == "pippa run" else ["--no-wait"]
                    p = pippa(
                        "run",
                        "tiny",
                        "--host",
                        host.name,
                        "-n",
                        name,
                        "--set",
                        "train.max_steps=100000",
                        *more,
                    )
                    run_id = p.stdout.split()[1]
                    if how != "pippa run":
                        while True:  # the user's loop: look once a second until the run shows a step
                            ps = json.loads(pippa("ps", "--host", host.name, "--json").stdout)
                            rec = next(r for r in ps[host.name]["runs"] if r["run_id"] == run_id)
                            if rec["last_step"] is not None or rec["state"] not in ("running", "queued"):
                                break
                            time.sleep(1.0)
                    seen = time.time()
                    header, step = first_lines(host.home / "pippa" / "runs" / run_id / "metrics.jsonl")
                    rows[how].append((seen - header, seen - step))
                    host.run_as_user(["tmux", "kill-session", "-t", f"={name}"])
        print(f"run-start bench: tiny recipe, real trainer on one loopback host, medians of {args.repeat}")
        print("  (lag: the command's return, or the poll that saw a step, minus the run's first line")
        print("   and minus its first step line; negative: before it)")
        for how, lags in rows.items():
            h = statistics.median(x for x, _ in lags)
            s = statistics.median(y for _, y in lags)
            print(f"  {how:<24} after header {h:6.2f} s   after first step {s:6.2f} s")
        s_run = statistics.median(y for _, y in rows["pippa run"])
        verdict = "ok" if s_run <= 1.0 else "MISSED"
        print(f"  goal: pippa run returns within 1 s of the first step line: {verdict}")
    finally:
        world.close()


if __name__ == "__main__":
    os.umask(0o022)
    main()
