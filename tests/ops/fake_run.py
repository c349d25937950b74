"""A stand-in training job for tests/ops/test_wait_pull_runs_compare.py (`pippa run --cmd` on a test host).

Writes ``$PIPPA_RUN_DIR/metrics.jsonl`` in the documented format (docs/CONTRACTS.md): the header of a
real run (its run id given as argv[1]) with two config values changed, then ``argv[2]`` step lines, an
eval line and an end line, so `pippa compare` has a second run whose config differs in known keys.
"""

from __future__ import annotations

import json
import os
import sys
import time

real_id, steps = sys.argv[1], int(sys.argv[2])
run_dir = os.environ["PIPPA_RUN_DIR"]
with open(os.path.join(os.path.dirname(run_dir), real_id, "metrics.jsonl")) as f:
    header = json.loads(f.readline())
header["run_id"] = os.path.basename(run_dir)
header["config"]["config"]["seed"] = 7
header["config"]["config"]["train"]["learning_rate"] = 0.002
header["wandb"] = None
header["time"] = time.time()
with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
    f.write(json.dumps(header) + "\n")
    for step in range(1, steps + 1):
        reward = 0.1 * step if step % 3 else 0.05 * step  # rises, with a dip: the EMA has work to do
        f.write(
            json.dumps(
                {
                    "type": "step",
                    "step": step,
                    "time": time.time(),
                    "reward/mean": reward,
                    "loss/total": 0.0,
                    "grad/norm": 1.0 / step,
                }
            )
            + "\n"
        )
    ev = {"type": "eval", "step": steps, "time": time.time(), "eval/accuracy": 0.5, "eval/n_problems": 4}
    f.write(json.dumps(ev) + "\n")
    end = {"type": "end", "status": "completed", "step": steps, "time": time.time(), "error": None}
    f.write(json.dumps(end) + "\n")
print(f"fake run wrote {steps} steps")
