"""The doctor's active part for real: on a CUDA GPU the whole doctor as a user runs it; on any machine
the active program's harness (every measurement on the CPU, tiny) and bench/gpu_acceptance.sh's dry
mode, so the script works the first time a GPU is lent."""

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


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)  # keep /tmp/site
    return {**os.environ, "PYTHONPATH": path, "PIPPA_NO_REUSE": "1"}


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_the_doctor_measures_every_gpu_of_this_machine() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pippa_ops", "doctor", "local", "--json"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode in (0, 1), r.stderr
    res = json.loads(r.stdout)[0]
    print(json.dumps(res, indent=1))  # the record, in the acceptance script's pytest log
    import torch

    n = torch.cuda.device_count()
    gemm = [c for c in res["checks"] if c["check"] == "gemm" and c["status"] != "skipped"]
    assert sorted(c["gpu"] for c in gemm if c["gpu"] is not None) == list(range(n))
    assert all(g["gemm_tflops"] > 20 for g in res["measured"]["gpus"].values())
    memory = [c for c in res["checks"] if c["check"] == "memory"]
    assert [c["status"] for c in memory] == ["ok"] * n
    assert not [
        c for c in res["checks"] if c["check"] in ("nvidia-smi", "torch", "active") and c["status"] == "fail"
    ]


def test_the_active_harness_runs_every_measurement_on_the_cpu() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "training_core.hardware.doctor_active", "--cpu", "--seconds", "0.1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    row = out["gpus"][0]
    assert row["gemm_tflops"] > 0 and row["copy_tbs"] > 0
    assert row["mem_gib"] > 0 and row["mem_errors"] == 0
    assert out.get("allreduce_gbs", 0) > 0, out.get("allreduce_error")  # two gloo ranks: NCCL's code path


@pytest.mark.skipif(_cuda(), reason="checks the answer of a machine without a GPU")
def test_without_a_gpu_the_active_program_says_skipped() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "training_core.hardware.doctor_active"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0 and json.loads(r.stdout) == {"skipped": "skipped (no GPU)"}


@pytest.mark.skipif(_cuda(), reason="the dry mode is for machines without a GPU")
def test_the_gpu_acceptance_script_runs_in_its_dry_mode(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    env = {**_env(), "DRY": "1", "PYTHON": sys.executable}
    r = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_acceptance.sh"), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    steps = {s["step"]: s["status"] for s in json.loads((out / "summary.json").read_text())}
    assert steps == {
        "capture": "skipped",
        "doctor": "ok",
        "doctor_quick": "ok",
        "active": "ok",
        "gemm_overhead": "ok",
        "pytest_gpu": "ok",
        "bf16_train": "skipped",
        "mfu": "ok",
    }
    assert json.loads((out / "doctor.json").read_text())[0]["host"] == "local"
    assert json.loads((out / "doctor_active.json").read_text())["gpus"][0]["mem_errors"] == 0
    assert json.loads((out / "gemm_overhead.json").read_text())["ratio"] > 0
    assert r.stdout.rstrip().splitlines()[-1].startswith("mfu")  # the summary comes last
