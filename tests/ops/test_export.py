"""``pippa export RECIPE --to skypilot|sbatch``: the SkyPilot task is valid by SkyPilot's own schema and its
``run:`` lines complete the tiny recipe on this machine; the sbatch script is the one a SLURM host gets.

SkyPilot's schema: tests/fixtures/skypilot/schemas-0.14.1.json, written by scripts/skypilot_schema.py from
the skypilot 0.14.1 wheel on PyPI (its sky/utils/schemas.py: get_task_schema, get_resources_schema,
get_storage_schema; the wheel's sha256 is in the file), checked with jsonschema the way SkyPilot checks a
task (sky/utils/validator.py: Draft 7 with its ``case_insensitive_enum`` / ``case_sensitive_enum``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pippa_contract import exitcodes as ec

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = json.loads((REPO / "tests" / "fixtures" / "skypilot" / "schemas-0.14.1.json").read_text())


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """SkyPilot's validator (sky/utils/validator.py, 0.14.1): Draft 7 and its two enum keywords."""

    def case_insensitive_enum(validator: Any, enums: list[str], instance: Any, schema: Any) -> Any:
        if instance.lower() not in [e.lower() for e in enums]:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")

    def case_sensitive_enum(validator: Any, enums: list[str], instance: Any, schema: Any) -> Any:
        if instance not in enums:
            yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")

    keywords = {"case_insensitive_enum": case_insensitive_enum, "case_sensitive_enum": case_sensitive_enum}
    return jsonschema.validators.extend(jsonschema.Draft7Validator, keywords)(schema)


def pippa(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pippa_ops", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)


def _task(*args: str) -> dict[str, Any]:
    p = pippa("export", "tiny", "--to", "skypilot", "--bucket", "s3://pippa-test/runs", *args)
    assert p.returncode == 0, p.stderr
    return dict(yaml.safe_load(p.stdout))


def test_the_skypilot_task_is_valid_by_skypilots_own_schema() -> None:
    task = _task("--nodes", "2", "--retry", "1")
    _validator(SCHEMAS["task"]).validate(task)
    _validator(SCHEMAS["resources"]).validate(task["resources"])
    for storage in task["file_mounts"].values():
        _validator(SCHEMAS["storage"]).validate(storage)
    assert task["num_nodes"] == 2 and task["resources"]["accelerators"] == "H100:8"
    recovery = task["resources"]["job_recovery"]
    assert recovery["recover_on_exit_codes"] == sorted(ec.INFRA_EXIT.values())
    assert recovery["max_restarts_on_errors"] == 1
    assert "uv sync --locked --extra train" in task["setup"]
    assert "SKYPILOT_NODE_RANK" in task["run"] and "SKYPILOT_NODE_IPS" in task["run"]
    (hook,) = task["config"]["hooks"]
    assert hook["events"] == ["preemption"] and "kill -USR2" in hook["run"]
    assert task["file_mounts"][task["envs"]["PIPPA_RUNS"]]["source"] == "s3://pippa-test/runs"
    bad = dict(task, resources=dict(task["resources"], job_recovery={"recover_on_exit_codes": [300]}))
    with pytest.raises(jsonschema.ValidationError):  # the schema does reject what SkyPilot rejects
        _validator(SCHEMAS["resources"]).validate(bad["resources"])


@pytest.mark.slow
def test_the_exported_run_lines_complete_the_tiny_recipe_on_one_cpu_node(tmp_path: Path) -> None:
    task = _task("--set", "train.max_steps=3", "--set", "eval.interval=1000", "--set", "checkpoint.every=2")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ACCELERATE_"))}
    env.update({k: str(v) for k, v in task["envs"].items() if v is not None})
    env.update(
        PIPPA_RUNS=str(tmp_path / "bucket"),
        SKYPILOT_NODE_RANK="0",
        SKYPILOT_NODE_IPS="127.0.0.1\n",
        SKYPILOT_NUM_NODES="1",
        CUDA_VISIBLE_DEVICES="",
    )  # (the bucket: a directory here)
    p = subprocess.run(
        ["sh", "-c", task["run"]], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    run_dir = tmp_path / "bucket" / "runs" / task["envs"]["PIPPA_RUN_ID"]
    log = (run_dir / "output.log").read_text() if (run_dir / "output.log").exists() else p.stdout + p.stderr
    assert p.returncode == 0, log[-3000:]
    assert (run_dir / "exit_code").read_text() == "0\n"
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["type"] == "step"] == [1, 2, 3]
    assert rows[-1]["status"] == "completed"
    (attempt,) = json.loads((run_dir / "attempts.json").read_text())["attempts"]
    assert attempt["class"] == "completed"

    # the bucket's copy, pulled from a plain directory, reads as any pulled run
    run_id, here = task["envs"]["PIPPA_RUN_ID"], tmp_path / "pulled"
    pulled = pippa("pull", "--from", str(tmp_path / "bucket"), "--as", "sky", "--runs-dir", str(here))
    assert pulled.returncode == 0, pulled.stderr
    listed = pippa("runs", "--pulled", "--runs-dir", str(here), "--json")
    assert listed.returncode == 0, listed.stderr
    (rec,) = [r for r in json.loads(listed.stdout)["runs"] if r["run_id"] == run_id]
    assert rec["host"] == "sky" and rec["state"] == "finished", rec
    why = pippa("why", run_id, "--host", "sky", "--runs-dir", str(here), "--json")
    assert why.returncode == 0, why.stderr
    assert [a["cls"] for a in json.loads(why.stdout)["attempts"]] == ["completed"]
    samples = pippa("samples", run_id, "--host", "sky", "--runs-dir", str(here), "--last", "--json")
    assert samples.returncode == 0, samples.stderr
    compare = pippa("compare", run_id, "--runs-dir", str(here), "--json")
    assert compare.returncode == 0 and run_id in compare.stdout, compare.stderr


def test_the_sbatch_export_is_a_slurm_hosts_job_script() -> None:
    p = pippa(
        "export", "tiny", "--to", "sbatch", "--nodes", "2", "--gpus", "H100:8", "--remote-dir", "/scratch/p"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("#!/bin/sh\n") and "#SBATCH --nodes=2\n" in p.stdout
    assert "#SBATCH --gres=gpu:8\n" in p.stdout and "#SBATCH --signal=B:USR1@90\n" in p.stdout
    assert "/scratch/p/.venv/bin/python -m training_core.launch tiny --run-dir /scratch/p/runs/" in p.stdout


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["nope", "--to", "skypilot", "--bucket", "s3://b/p"], "unknown recipe 'nope'"),
        (["tiny", "--to", "skypilot", "--bucket", "s3://b/p", "--nodes", "0"], "--nodes 0"),
        (["tiny", "--to", "sbatch", "--nodes", "0"], "--nodes 0"),
        (["tiny", "--to", "skypilot"], "--bucket"),
        (["tiny", "--to", "k8s"], "--to 'k8s'"),
        (["tiny", "--to", "skypilot", "--bucket", "s3://b/p", "--set", "no.such=1"], "unknown setting"),
    ],
)
def test_bad_input_to_export_is_one_line(args: list[str], why: str) -> None:
    p = pippa("export", *args)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert why in p.stderr and "Traceback" not in p.stderr
