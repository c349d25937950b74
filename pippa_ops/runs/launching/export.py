"""``pippa export RECIPE --to skypilot|sbatch``: a run as a file for an engine pippa does not drive.

- ``skypilot``: a SkyPilot task YAML (the template ``templates/skypilot.yaml``): the project as
  ``workdir``, ``uv sync --locked`` with the recipe's extra as ``setup``, and as ``run`` the launcher
  with its machine rank and main address from ``SKYPILOT_NODE_RANK`` / ``SKYPILOT_NODE_IPS`` under the
  host supervisor on the first node (``python -m pippa_agent.program task``: stall watch, failure
  classes, each infrastructure class's exit status); ``resources.job_recovery.recover_on_exit_codes``
  are those statuses (pippa_contract.exitcodes); the run directory is on a bucket mount; a preemption
  hook sends the supervisor SIGUSR2 (the trainer saves and exits ``preempted``).
- ``sbatch``: the job.sbatch a SLURM host gets (``runs.launching.slurm``), for a cluster pippa does not reach.

Pure: checks the names and settings as a launch does, returns the text; nothing touches a host.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Sequence

from pippa_contract import exitcodes as ec
from pippa_contract.names import new_run_id
from pippa_ops.errors import BadSetting
from pippa_ops.hosts.scheduler import SlurmSpec
from pippa_ops.runs.launching.recipes import check_recipe, check_settings
from pippa_ops.runs.launching.script import parse_sets, recipe_job
from pippa_ops.runs.launching.slurm import render_sbatch
from pippa_ops.runs.launching.templates import render

TARGETS = ("skypilot", "sbatch")
MAIN_PORT = 29500  # torch's usual c10d port, on the first node
_ACCEL_RE = re.compile(r"^[A-Za-z0-9-]{1,40}(?::[1-9][0-9]{0,2})?$")  # H100:8, A100-80GB:4, L4
_BUCKET_RE = re.compile(r"^(?:s3|gs|r2|cos|oci|https)://[A-Za-z0-9][A-Za-z0-9._/-]{0,250}$")
_MOUNT_RE = re.compile(r"^/[A-Za-z0-9._/-]{1,200}$")


def _dq(text: str) -> str:
    """``text`` safe inside a double-quoted sh string (its single-quoted words stay words)."""
    return re.sub(r'(["$`\\])', r"\\\1", text)


def _uses_vllm(recipe: str, parsed: Sequence[tuple[str, str]]) -> bool:
    """Whether the run generates with vLLM (the ``vllm`` extra, not ``train``): ``train.use_vllm = true``
    in the recipe file or a ``--set``."""
    import tomllib

    from pippa_ops.runs.launching.recipes import recipes_dir

    with (recipes_dir() / f"{recipe}.toml").open("rb") as f:
        value: object = tomllib.load(f).get("train", {}).get("use_vllm")
    for key, raw in parsed:
        if key == "train.use_vllm":
            value = raw.strip().strip("\"'").lower() == "true"
    return value is True


def export(
    recipe: str,
    to: str,
    *,
    sets: Sequence[str] = (),
    nodes: int = 1,
    accelerators: str = "H100:8",
    bucket: str | None = None,
    mount: str = "/pippa-runs",
    retries: int = 0,
    grace_s: int = 300,
    remote_dir: str = "~/pippa",
) -> str:
    """The file's text; bad input raises UnknownRecipe / BadSetting (one line each)."""
    if to not in TARGETS:
        raise BadSetting(f"--to {to!r}: one of {', '.join(TARGETS)}")
    check_recipe(recipe)
    if nodes < 1:
        raise BadSetting(f"--nodes {nodes}: a run needs at least one node")
    if retries < 0:
        raise BadSetting(f"--retry {retries}: must be >= 0")
    if not _ACCEL_RE.match(accelerators):
        raise BadSetting(f"--gpus {accelerators!r}: a SkyPilot accelerator like H100:8")
    check_settings(recipe, sets)
    parsed = parse_sets(sets)
    run_id = new_run_id(recipe, time.time())
    gpus = int(accelerators.partition(":")[2] or 1)
    if to == "sbatch":
        job = recipe_job(run_id, recipe, None, remote_dir, parsed)
        return render_sbatch(
            SlurmSpec(nodes=nodes, gpus_per_node=gpus), run_id, remote_dir, job.command, {}, retries=retries
        )
    if bucket is None or not _BUCKET_RE.match(bucket):
        raise BadSetting(
            "--bucket: where the run directory lives, e.g. s3://my-bucket/pippa (s3, gs, r2, ...)"
        )
    if not _MOUNT_RE.match(mount):
        raise BadSetting(f"--mount {mount!r}: an absolute path")
    words = [".venv/bin/python", "-m", "training_core.launch", recipe, "--run-dir"]
    tail = [w for key, value in parsed for w in ("--set", f"{key}={value}")]
    launch = _dq(shlex.join(words)) + " $RUN_DIR" + (" " + _dq(shlex.join(tail)) if tail else "")
    return render(
        "skypilot.yaml",
        recipe=recipe,
        task_name=json.dumps(f"pippa-{recipe}".replace("_", "-")),
        nodes=str(nodes),
        accelerators=json.dumps(accelerators),
        retries=str(retries),
        infra_codes=json.dumps(list(ec.INFRA_CODES)),
        bucket=json.dumps(bucket),
        mount=mount,
        run_id=json.dumps(run_id),
        extra="vllm" if _uses_vllm(recipe, parsed) else "train",
        launch=launch,
        port=str(MAIN_PORT),
        recipe_word=shlex.quote(recipe),
        grace=str(grace_s),
    )
