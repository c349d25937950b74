"""bench/gpu_perf.sh in its CPU dry mode, every part that exists (bench/gpu_perf/part_*.py, globbed, so a
part added later is covered too): a typo in a part fails here, not on a lent GPU machine's minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PARTS = sorted(p.stem.removeprefix("part_").upper() for p in (REPO / "bench" / "gpu_perf").glob("part_*.py"))
BASE_KEYS = {"part", "dry", "date_utc", "seconds"}


@pytest.mark.slow
def test_every_part_runs_dry_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "DRY": "1", "PYTHON": sys.executable, "PARTS": " ".join(PARTS)}
    script = str(REPO / "bench" / "gpu_perf.sh")
    r = subprocess.run(["bash", script, str(out)], env=env, capture_output=True, text=True, timeout=600)
    logs = {p: (out / f"{p}.log").read_text()[-2000:] for p in PARTS if (out / f"{p}.log").is_file()}
    assert r.returncode == 0, (r.stdout[-3000:], logs)
    lines = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [[p, "ok"] for p in PARTS]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(rec["part"] for rec in summary if rec.get("part") in PARTS) == PARTS
    for p in PARTS:
        rec = json.loads((out / f"{p}.json").read_text())
        # the figures beside the keys every part writes
        assert rec["part"] == p and rec["dry"] is True and set(rec) > BASE_KEYS, rec

    if "E" in PARTS:
        assert json.loads((out / "E.json").read_text())["versions"]["torch"]
    if "P" in PARTS:  # the dry P settles an H100's default: fp32 master weights; pure bf16 loses updates
        p = json.loads((out / "P.json").read_text())
        default, pure = p["runs"][f"{p['default']['mode']}@1e-06"], p["runs"]["bf16_pure@1e-06"]
        assert p["default"]["mode"] == "bf16_amp"
        assert default["update_norm_ratio"] == pytest.approx(1.0, abs=0.01)
        assert pure["changed"] < 0.5 * default["changed"] and pure["changed_norm_weights"] == 0.0
    if "T" in PARTS:  # every run finished and evaluated; the curve is kept as data
        t = json.loads((out / "T.json").read_text())
        runs = [*t["tiny"].values(), t["char_model"]["sft"], t["char_model"]["grpo"]]
        assert all(run["rc"] == 0 and run["curve"] for run in runs), runs
        assert t["tiny"]["0"]["constant_baseline"] is not None
        assert json.loads((out / "T-curve.json").read_text())["grpo"]["curve"]
