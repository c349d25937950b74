"""A stand-in ``nvidia-smi`` for test hosts that replays a REAL captured output.

The capture (tests/fixtures/nvidia-smi/h100_load_query_gpu_full.csv, header included) is embedded in
the script; it answers any ``--query-gpu=`` field list from it (units dropped for ``nounits``) and
repeats the sample every N seconds with ``-l N``, as the real tool does. ``gpus`` copies the captured
GPU to more indices; ``stamp`` writes the print time into the uuid (the benchmark's latency probe).
Without ``xml``, ``-q`` answers as nvidia-smi does where the driver is not loaded (the doctor then
skips its GPU checks instead of failing a fake that models only the queries). With ``xml`` (a path),
``-q -x`` prints that file, read at each call (the doctor's fixtures,
tests/doctor/doctor_fixtures.py: a file saying ``HANG`` makes it hang, a missing one answers as a host whose
driver is not loaded); with ``nvlink``, ``nvlink -s`` prints that file; with ``apps`` (a capture of
``--query-compute-apps`` with its header), the compute-process query answers from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

CAPTURE = Path(__file__).parents[1] / "fixtures" / "nvidia-smi" / "h100_load_query_gpu_full.csv"
APPS = CAPTURE.with_name("h100_load_compute_apps.csv")  # that GPU's processes, for ``apps``

_SCRIPT = r"""#!{python}
import csv, io, re, sys, time
CAPTURE = {capture!r}
GPUS = {gpus}
STAMP = {stamp}
COUNT = {count}
XML, NVLINK, APPS = {xml!r}, {nvlink!r}, {apps!r}
args = sys.argv[1:]
apps_query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-compute-apps=")), None)
if APPS and apps_query is not None:
    rows = list(csv.reader(io.StringIO(open(APPS).read()), skipinitialspace=True))
    alias = {{"used_memory": "used_gpu_memory"}}
    heads = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    for row in rows[1:]:
        cells = dict(zip(heads, row))
        out = [cells.get(alias.get(f, f), "[N/A]") for f in apps_query.split(",")]
        out = [v.split()[0] if "nounits" in " ".join(args) and v.endswith(" MiB") else v for v in out]
        print(", ".join(out))
    sys.exit(0)
if XML and "-q" in args and "-x" in args:
    try:
        text = open(XML).read()
    except OSError:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        sys.exit(9)
    if text.startswith("HANG"):
        time.sleep(3600)
    sys.stdout.write(text)
    sys.exit(0)
if not XML and "-q" in args:  # a fake of the queries only: to the doctor, a host whose driver is not loaded
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit(9)
if NVLINK and args[:2] == ["nvlink", "-s"]:
    sys.stdout.write(open(NVLINK).read())
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
"""


def script(
    gpus: int = 1,
    stamp: bool = False,
    python: str = sys.executable,
    xml: str | None = None,
    nvlink: str | None = None,
    apps: str | None = None,
    count: bool = False,
) -> str:
    """The fake's text; on a test host pass the host's ``python`` (one its user can run). ``count``:
    a loop's Nth sample (from 0) reports 100 - N % utilization, so a test can tell samples apart."""
    return _SCRIPT.format(
        python=python,
        capture=CAPTURE.read_text(),
        gpus=gpus,
        stamp=stamp,
        xml=xml,
        nvlink=nvlink,
        apps=apps,
        count=count,
    )
