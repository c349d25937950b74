"""On a CUDA GPU: bf16 weights where torch supports bf16, a few tiny-recipe steps with the GPU metrics,
and the max_gpu bench's shape. Every test skips cleanly without CUDA (``-m gpu`` selects them); the
bench's no-GPU line is checked on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


needs_cuda = pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


@pytest.mark.gpu
@needs_cuda
def test_the_default_keeps_fp32_master_weights_where_torch_has_bf16() -> None:
    import torch

    from training_core.hardware.platform import detect
    from training_core.models import load_model, settle
    from training_core.recipes import resolve

    facts = detect(offline_probe=False)
    res = settle(resolve("tiny", [], facts), facts, REPO / "runs")  # the config frozen, settled anew
    model, _ = load_model(res.config.model.name, res.config.model.precision)
    # the tiny model's fp32 master weights fit any GPU: bf16 settles into bf16_amp; fp16 keeps fp32 too
    assert next(model.parameters()).dtype == torch.float32
    assert res.config.model.precision == ("bf16_amp" if torch.cuda.is_bf16_supported() else "fp16")
    pure = settle(resolve("tiny", ["model.precision=bf16_pure"], facts), facts, REPO / "runs")
    if torch.cuda.is_bf16_supported():  # the old layout, by name
        model, _ = load_model(pure.config.model.name, pure.config.model.precision)
        assert next(model.parameters()).dtype == torch.bfloat16


@pytest.mark.gpu
@needs_cuda
def test_tiny_recipe_trains_on_the_gpu_and_reports_peak_memory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sets = ["train.max_steps=5", "eval.interval=5", "checkpoint.every=0"]
    argv = [sys.executable, "-m", "training_core.train", "tiny", "--run-dir", str(run_dir)]
    for s in sets:
        argv += ["--set", s]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in recs if x["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert all(s["perf/peak_mem_gb"] > 0 for s in steps)
    assert recs[0]["config"]["config"]["model"]["precision"] in ("bf16_amp", "fp16")
    assert recs[-1]["status"] == "completed"


@pytest.mark.gpu
@needs_cuda
def test_max_gpu_bench_reports_its_numbers_on_a_small_batch() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import bench_max_gpu

    sets = ["train.per_device_train_batch_size=16", "train.max_completion_length=32"]
    r = bench_max_gpu.run(steps=3, warmup=1, prompt_tokens=64, sets=sets)
    assert r["params"] > 400e6 and r["peak_mem_pct"] > 0 and r["train_tokens_per_s"] > 0
    assert r["gen_tokens_per_s"] > 0 and r["steps_measured"] == 2


@pytest.mark.skipif(_cuda(), reason="checks the line printed on a machine without CUDA")
def test_max_gpu_bench_says_in_one_line_that_there_is_no_gpu() -> None:
    r = subprocess.run(
        [sys.executable, "bench/bench_max_gpu.py"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no CUDA GPU here" in r.stderr
