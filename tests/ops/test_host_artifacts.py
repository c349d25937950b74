"""The scripts a launch writes on a host (cmd.sh, job.sbatch) against golden files: a change to a
template shows as a diff of the whole script. Regenerate a golden only after reading that diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from pippa_ops.hosts.scheduler import SlurmSpec
from pippa_ops.runs.launching.script import Job, cmd_job, recipe_job, render_cmd_sh
from pippa_ops.runs.launching.slurm import launch_words, render_sbatch
from pippa_ops.runs.launching.templates import render

GOLDEN = Path(__file__).parent / "golden"
RID = "20260101-120000-tiny-abcd"
ENV = {"HF_HOME": "/data/hf cache"}
CLUSTER = SlurmSpec(
    partition="gpu", account="lab", time="04:00:00", nodes=2, gpus_per_node=8, cpus_per_task=16
)


def _recipe_job() -> Job:
    return recipe_job(RID, "tiny", None, "~/pippa", [("train.max_steps", "3")])


CASES = {
    "cmd_sh_recipe.sh": lambda: render_cmd_sh(_recipe_job(), "~/pippa", ENV),
    "cmd_sh_supervised.sh": lambda: render_cmd_sh(_recipe_job(), "~/pippa", ENV, supervised=True),
    "cmd_sh_cmd.sh": lambda: render_cmd_sh(
        cmd_job("20260101-120000-cmd-abcd", "echo 'hi'; sleep 1"), "/srv/p q", {}
    ),
    "job_sbatch_recipe.sh": lambda: render_sbatch(
        CLUSTER,
        RID,
        "~/pippa",
        launch_words([".venv/bin/python"], "tiny", f"~/pippa/runs/{RID}", [("train.max_steps", "3")]),
        ENV,
    ),
    "job_sbatch_site.sh": lambda: render_sbatch(
        SlurmSpec(
            signal_s=120,
            extra=("#SBATCH --exclusive", "#SBATCH --mem=0"),
            template=str(GOLDEN / "site_template.sbatch"),
            container_image="nvcr.io/nvidia/pytorch:25.01-py3",
        ),
        RID,
        "/scratch/me/pippa",
        launch_words(["python3"], "tiny", f"/scratch/me/pippa/runs/{RID}", []),
        {},
        retries=2,
    ),
    "job_sbatch_cmd.sh": lambda: render_sbatch(
        SlurmSpec(), "20260101-120000-cmd-abcd", "/srv/p", "nvidia-smi; echo done", {}, rendezvous=False
    ),
}


@pytest.mark.parametrize("golden", sorted(CASES))
def test_host_script_matches_its_golden_file(golden: str) -> None:
    assert CASES[golden]() == (GOLDEN / golden).read_text()


def test_a_template_value_missing_or_left_over_is_refused() -> None:
    with pytest.raises(KeyError, match="missing"):
        render("cmd.sh", run_id="x")
