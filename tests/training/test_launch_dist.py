"""Many processes on one host, for real: ``python -m training_core.launch`` starts 2 gloo ranks on the CPU
through ``accelerate launch``, with DDP and with DeepSpeed ZeRO-3, on a few short steps of the tiny model.

What catches accelerate's two traps: ``--cpu --num_processes 2`` runs ONE process (then there is no
rank 1 probe and the world size is 1); ``--multi_gpu`` without ``use_cpu`` starts two ranks that each
train alone on the same batches (then each reports world size 1, and both equal the 1-process run).
Gradients were all-reduced when both ranks end with the same weights and those differ from the
1-process run's (each rank saw its own half of a twice-as-large batch); ZeRO-3 must end where DDP
ends, with each rank holding only half the weights. The first ZeRO-3 run on a machine compiles
DeepSpeed's shared-memory op for CPU ranks (minutes); ``scripts/setup`` builds it ahead into
``.venv/torch_extensions``, which these tests use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from training_core import launch
from training_core.config import LaunchConfig
from training_core.errors import BadSetting, UsageError
from training_core.hardware.platform import PlatformFacts

REPO = Path(__file__).resolve().parents[2]
CPU = PlatformFacts()
H100x8 = PlatformFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8, gpu_memory_gb=80, bf16=True)
STEPS = 2

PROBE_RECIPE = Path(__file__).with_name("probe.toml")  # STEPS steps, a checkpoint at the last


# --- the launch plan, without starting anything ---------------------------------------------------


def test_gpu_lists_expand_ranges_and_reject_junk() -> None:
    assert launch.parse_gpus("0-6") == [0, 1, 2, 3, 4, 5, 6]
    assert launch.parse_gpus("0,2,4-5,2") == [0, 2, 4, 5]
    assert launch.parse_gpus("") == []
    for bad in ("0-", "a", "1;rm -rf /", "3-1"):
        with pytest.raises(BadSetting):
            launch.parse_gpus(bad)


def test_one_process_runs_the_trainer_itself_and_pins_its_gpus(tmp_path: Path) -> None:
    p = launch.plan("tiny", ["train.max_steps=3"], tmp_path, False, LaunchConfig(gpus="3"), "bf16", H100x8)
    assert p.config is None and p.env == {"CUDA_VISIBLE_DEVICES": "3"}
    assert p.argv[1:] == [
        "-m",
        "training_core.train",
        "tiny",
        "--set",
        "train.max_steps=3",
        "--run-dir",
        str(tmp_path),
    ]


def test_ddp_on_a_gpu_host_is_accelerate_multi_gpu_on_the_chosen_gpus_in_bf16(tmp_path: Path) -> None:
    p = launch.plan("r", [], tmp_path, True, LaunchConfig(processes=7, gpus="0-6"), "bf16", H100x8)
    config_file = str(tmp_path / "accelerate.yaml")
    assert p.argv[1:5] == ["-m", "accelerate.commands.launch", "--config_file", config_file]
    assert p.argv[-1] == "--resume" and p.env == {}
    cfg = p.config
    assert cfg is not None
    assert (cfg["distributed_type"], cfg["num_processes"], cfg["use_cpu"]) == ("MULTI_GPU", 7, False)
    assert (cfg["gpu_ids"], cfg["mixed_precision"]) == ("0,1,2,3,4,5,6", "bf16")


def test_zero3_and_cpu_ranks_in_the_config_accelerate_itself_reads(tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = launch.accelerate_config(LaunchConfig(processes=2, strategy="zero3"), "fp32", CPU)
    read = load_config_from_file(str(launch.write_config(tmp_path, cfg)))
    assert read.distributed_type == "DEEPSPEED" and read.num_processes == 2 and read.use_cpu
    assert read.deepspeed_config["zero_stage"] == 3 and read.mixed_precision == "no"
    assert read.deepspeed_config["deepspeed_multinode_launcher"] == "standard"
    ddp = load_config_from_file(
        str(launch.write_config(tmp_path, launch.accelerate_config(LaunchConfig(processes=2), "fp32", CPU)))
    )
    # MULTI_GPU + use_cpu is what starts N gloo ranks; MULTI_CPU would start one process.
    assert ddp.distributed_type == "MULTI_GPU" and ddp.use_cpu and ddp.num_processes == 2


def test_several_machines_meet_at_the_first_one_and_need_a_fixed_port(tmp_path: Path) -> None:
    rdv = launch.Rendezvous(machines=2, machine_rank=1, main_addr="10.0.0.1", main_port=29400)
    cfg = launch.accelerate_config(LaunchConfig(processes=4, strategy="zero3"), "bf16", H100x8, rdv)
    assert (cfg["num_processes"], cfg["num_machines"], cfg["machine_rank"]) == (8, 2, 1)
    assert (cfg["main_process_ip"], cfg["main_process_port"]) == ("10.0.0.1", 29400)
    assert cfg["rdzv_backend"] == "c10d"
    with pytest.raises(UsageError, match="main-port"):
        launch.plan("r", [], tmp_path, False, LaunchConfig(), "bf16", H100x8, launch.Rendezvous(machines=2))
    with pytest.raises(UsageError, match="rank"):
        launch.Rendezvous(machines=2, machine_rank=2, main_port=1).check()


def test_more_processes_than_gpus_or_a_missing_gpu_or_two_precisions_is_one_clear_error() -> None:
    with pytest.raises(BadSetting, match="only 2 GPU"):
        launch.check(LaunchConfig(processes=3, gpus="0,1"), H100x8)
    with pytest.raises(BadSetting, match="GPU 8 does not exist"):
        launch.check(LaunchConfig(gpus="7-8"), H100x8)
    with pytest.raises(BadSetting, match=r"contradicts model\.precision=bf16"):
        launch.mixed_precision(LaunchConfig(mixed_precision="fp16"), "bf16", H100x8)
    launch.check(LaunchConfig(processes=4), CPU)  # CPU ranks: as many as asked


def test_the_cli_writes_the_config_and_prints_the_command(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training_core.launch",
            "tiny",
            "--processes",
            "2",
            "--strategy",
            "zero2",
            "--run-dir",
            str(tmp_path / "run"),
            "--print",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert r.returncode == 0, r.stderr
    assert "accelerate.commands.launch --config_file" in r.stdout and "launch.strategy=" in r.stdout
    assert "zero_stage: 2" in (tmp_path / "run" / "accelerate.yaml").read_text()
    bad = subprocess.run(
        [sys.executable, "-m", "training_core.launch", "tiny", "--processes", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: bad value for launch.processes: must be >= 1, got 0"
    ]


# --- two real gloo ranks ----------------------------------------------------------------------------


def torch_extensions_dir() -> Path:
    """Where scripts/setup built DeepSpeed's CPU communication op (a JIT build would take minutes)."""
    return Path(sys.prefix) / "torch_extensions"


def _start(run_dir: Path, recipe: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ACCELERATE_"))}
    env.update(PYTHONPATH=str(REPO), TORCH_EXTENSIONS_DIR=str(torch_extensions_dir()))
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.Popen(
        [sys.executable, "-m", "training_core.launch", str(recipe), "--run-dir", str(run_dir), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _probes(run_dir: Path) -> dict[int, dict[str, Any]]:
    import torch

    probes = {}
    for path in sorted(run_dir.glob("probe-rank*.pt")):
        probe = torch.load(path)
        probes[probe["rank"]] = probe
    return probes


# The three runs are trained once (``runs``): the module's tests share one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("launch_dist")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[int, dict[str, Any]]]]:
    """The three runs at once (each is deterministic: sharing the cores changes only their speed)."""
    base = tmp_path_factory.mktemp("dist")
    shapes = {"single": (), "ddp": ("--processes", "2"), "zero3": ("--processes", "2", "--strategy", "zero3")}
    dirs = {name: base / f"20260101-000000-{name}-abcd" for name in shapes}
    procs = {name: _start(dirs[name], PROBE_RECIPE, *args) for name, args in shapes.items()}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=400)
        assert proc.returncode == 0, f"{name}:\n{out[-4000:]}"
    return {name: (dirs[name], _probes(dirs[name])) for name in shapes}


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a["params"].keys() == b["params"].keys()
    return max(float((a["params"][k] - b["params"][k]).abs().max()) for k in a["params"])


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ddp_two_gloo_ranks_all_reduce_their_gradients(runs: dict[str, Any]) -> None:
    (_, single), (run_dir, ddp) = runs["single"], runs["ddp"]
    assert sorted(ddp) == [0, 1] and [ddp[r]["world"] for r in (0, 1)] == [2, 2]
    assert single[0]["world"] == 1
    assert _max_diff(ddp[0], ddp[1]) == 0.0  # the ranks stepped together
    assert _max_diff(ddp[0], single[0]) > 1e-4  # on a batch twice as large as one process's
    # One record of the run, from rank 0: one header, each step once, one end line.
    recs = _records(run_dir)
    assert [r["type"] for r in recs] == ["header", *["step"] * STEPS, "end"]
    assert recs[-1]["status"] == "completed" and recs[0]["config"]["config"]["launch"]["processes"] == 2
    ckpt = run_dir / "checkpoints" / f"checkpoint-{STEPS}"
    assert {"rng_state_0.pth", "rng_state_1.pth", "model.safetensors"} <= {p.name for p in ckpt.iterdir()}
    assert not (run_dir / "checkpoints" / ".staging").exists()


@pytest.mark.slow
def test_zero3_two_gloo_ranks_shard_the_weights_and_train_like_ddp(runs: dict[str, Any]) -> None:
    (_, single), (_, ddp), (run_dir, z3) = runs["single"], runs["ddp"], runs["zero3"]
    assert sorted(z3) == [0, 1] and [z3[r]["world"] for r in (0, 1)] == [2, 2]
    total = sum(t.numel() for t in z3[0]["params"].values())
    assert all(z3[r]["sharded"] and z3[r]["local_numel"] <= total // 2 + 64 for r in (0, 1))
    assert _max_diff(z3[0], z3[1]) == 0.0
    assert _max_diff(z3[0], ddp[0]) < 1e-4 < _max_diff(z3[0], single[0])
    recs = _records(run_dir)
    assert [r["type"] for r in recs] == ["header", *["step"] * STEPS, "end"]
    ckpt = run_dir / "checkpoints" / f"checkpoint-{STEPS}"
    shards = {p.name for p in ckpt.rglob("*_optim_states.pt")}
    assert len(shards) == 2, sorted(p.name for p in ckpt.rglob("*"))  # one optimizer shard per rank
