"""What every part of bench/gpu_perf.sh shares: its arguments, the JSON it writes, the device it runs on.

A part is run as ``python bench/gpu_perf/part_<x>.py --out OUT/<X>.json [--dry]`` (this directory is then
on sys.path, and the repo root is put there too). ``--dry`` runs the same code on the CPU with a toy shape
so that the suite catches a typo before a GPU minute is spent. The last line a part prints is its headline
(the script's summary shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def args(doc: str | None) -> argparse.Namespace:
    """``--out`` (the part's JSON) and ``--dry`` (CPU, toy shape)."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    p.add_argument("--out", type=Path, required=True, help="where the part's JSON goes")
    p.add_argument("--dry", action="store_true", help="CPU, toy shape (the suite's check of the script)")
    return p.parse_args()


def device(dry: bool) -> str:
    """``cuda`` on a GPU machine, ``cpu`` in the dry mode; a GPU part without CUDA exits with one line."""
    if dry:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run with DRY=1 for the CPU dry mode")
    return "cuda"


def write(out: Path, part: str, dry: bool, started: float, **figures: Any) -> None:
    """The part's JSON, written whole (tmp + rename) as soon as the part ends."""
    record = {
        "part": part,
        "dry": dry,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - started, 2),
        **figures,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(tmp, out)
