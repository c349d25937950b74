"""A stand-in ``nvidia-smi`` for test hosts that replays a REAL captured output.

The capture (tests/fixtures/nvidia-smi/h100_load_query_gpu_full.csv, header included) is embedded in
the script; it answers any ``--query-gpu=`` field list from it (units dropped for ``nounits``) and
repeats the sample every N seconds with ``-l N``, as the real tool does. ``gpus`` copies the captured
GPU to more indices; ``stamp`` writes the print time into the uuid (the benchmark's latency probe).
``--query-compute-apps`` answers the captured processes of that GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

CAPTURE = Path(__file__).parents[1] / "fixtures" / "nvidia-smi" / "h100_load_query_gpu_full.csv"
APPS = CAPTURE.with_name("h100_load_compute_apps.csv")  # --query-compute-apps: the same GPU's processes

_SCRIPT = r'''#!{python}
import csv, io, re, sys, time
CAPTURE = {capture!r}
APPS = {apps!r}
GPUS = {gpus}
STAMP = {stamp}
COUNT = {count}
args = sys.argv[1:]
apps = next((a.split("=", 1)[1] for a in args if a.startswith("--query-compute-apps=")), None)
if apps is not None:
    rows = list(csv.reader(io.StringIO(APPS), skipinitialspace=True))
    names = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    names = ["used_memory" if n == "used_gpu_memory" else n for n in names]
    for row in rows[1:]:
        got = dict(zip(names, row))
        print(", ".join(got.get(f, "[N/A]").replace(" MiB", "") for f in apps.split(",")))
    sys.exit(0)
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is None:
    print("fake nvidia-smi: only --query-gpu is replayed", file=sys.stderr)
    sys.exit(2)
loop = float(args[args.index("-l") + 1]) if "-l" in args else None
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "csv")
rows = list(csv.reader(io.StringIO(CAPTURE), skipinitialspace=True))
names = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
captured = dict(zip(names, rows[1]))

def cell(field, index):
    v = captured.get(field, "[N/A]")
    if field == "index":
        v = str(index)
    elif field == "count":
        v = str(GPUS)
    elif field == "utilization.gpu" and COUNT:
        v = "%d %%" % max(0, 100 - SAMPLE)
    elif field == "uuid" and STAMP:
        v = "GPU-%.6f" % time.time()
    if "nounits" in fmt and re.fullmatch(r"-?[0-9.]+ (MiB|%|W|MHz|C)", v):
        v = v.split()[0]
    return v

fields = query.split(",")
SAMPLE = 0
while True:
    out = []
    if "noheader" not in fmt:
        out.append(", ".join(fields))
    for i in range(GPUS):
        out.append(", ".join(cell(f, i) for f in fields))
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
    if loop is None:
        break
    SAMPLE += 1
    time.sleep(loop)
'''


def script(gpus: int = 1, stamp: bool = False, python: str = sys.executable, count: bool = False) -> str:
    """The fake's text; on a test host pass the host's ``python`` (one its user can run). ``count``:
    a loop's Nth sample (from 0) reports 100 - N % utilization, so a test can tell samples apart."""
    return _SCRIPT.format(python=python, capture=CAPTURE.read_text(), apps=APPS.read_text(), gpus=gpus,
                          stamp=stamp, count=count)
