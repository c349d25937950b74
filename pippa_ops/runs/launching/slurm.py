"""The sbatch script of a run on a SLURM cluster: one pure builder, unit-tested without a cluster.

The script (written as ``runs/<id>/job.sbatch`` by the host agent's ``slurm_submit``) keeps cmd.sh's
guarantees: secrets sourced from the 0600 file inside the job, never in the script; ``started`` and
``exit_code`` (tmp + rename) recorded, and the job exits with the run's status (SLURM's FAILED means
the run failed); a run whose ``stop_requested`` exists does not start. It runs
``srun`` with one task per node; each task starts ``python -m training_core.launch`` as machine
``$SLURM_PROCID`` of ``$SLURM_NTASKS``, meeting at the first node of the allocation (c10d rendezvous
on a port derived from the job id), so N nodes are N launchers of one accelerate run; on one node it
is the plain launch. ``scancel --signal=INT`` (``pippa stop``) reaches every process of the step: the
trainer saves its checkpoint and exits 130, then the script records that. Before the time limit
(``--signal=B:USR1@signal_s``, a recipe job) the script passes USR1 on to the step: the trainer saves
and exits ``timelimit`` (pippa_contract.exitcodes), and the job requeues itself to resume from that
checkpoint without spending ``--retry``. The host entry's ``extra`` #SBATCH lines follow pippa's, a
``template`` of the cluster's receives pippa's directives and job at its two placeholders, and a
``container_image`` runs every task in that image (Pyxis' ``srun --container-image``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pippa_contract import exitcodes as ec
from pippa_contract import rundir as rd
from pippa_contract.rundir import RunDir
from pippa_contract.secrets import SECRETS_PATH
from pippa_ops.hosts.scheduler import TEMPLATE_PARTS, SlurmSpec, template_text
from pippa_ops.runs.launching.script import source_secrets_line
from pippa_ops.runs.launching.templates import render
from pippa_ops.transport.shell import export_line, sh_path

PORT_BASE, PORT_SPAN = 20000, 20000  # rendezvous port: PORT_BASE + job id % PORT_SPAN


def directives(spec: SlurmSpec, run_id: str) -> list[str]:
    spec.check()
    lines = [
        f"--job-name={run_id}",
        "--output=output.log",  # in the run directory: the agent submits with --chdir there
        "--open-mode=append",
        f"--nodes={spec.nodes}",
        f"--ntasks-per-node={spec.tasks_per_node}",
    ]
    for flag, value in (("partition", spec.partition), ("account", spec.account), ("time", spec.time)):
        if value:
            lines.append(f"--{flag}={value}")
    if spec.gpus_per_node:
        lines.append(f"--gres=gpu:{spec.gpus_per_node}")
    if spec.cpus_per_task:
        lines.append(f"--cpus-per-task={spec.cpus_per_task}")
    return [f"#SBATCH {d}" for d in lines] + list(spec.extra)


def launch_words(python: Sequence[str], recipe: str, run_dir: str, sets: Sequence[tuple[str, str]]) -> str:
    """``<python> -m training_core.launch RECIPE --run-dir DIR --set k=v ...``, as shell words."""
    words = [*python, "-m", "training_core.launch", shlex.quote(recipe), "--run-dir", sh_path(run_dir)]
    for key, value in sets:
        words += ["--set", shlex.quote(f"{key}={value}")]
    return " ".join(words)


# A requeued job's attempt (SLURM_RESTART_COUNT > 0) continues from its newest checkpoint.
RESUME_LINE = 'RESUME=; [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && RESUME=--resume\n'
# SLURM sends USR1 before the time limit to this script alone (``B:``). sh runs a trap only between
# commands, so srun runs in the background and the script waits on it: the trap passes the signal to the
# step at once (srun forwards it to every task; the trainer saves the current step and exits timelimit).
TRAP_LINE = "asked=; trap 'asked=1; kill -USR1 \"$step\" 2>/dev/null' USR1\n"
WAIT_BACKGROUND = (
    " &\n"
    "step=$!\n"
    'wait "$step"; code=$?\n'
    'while kill -0 "$step" 2>/dev/null; do wait "$step"; code=$?; done\n'
    '[ -n "$asked" ] && [ $code -ne 0 ] && code={timelimit}  # ended before it could save: still the limit'
)
# An attempt that saved for the time limit (or a preemption) requeues the job, counted apart from --retry.
SAVED_REQUEUE_LINE = (
    'free=$(cat "$RUN_DIR/{free}" 2>/dev/null || echo 0)\n'
    "if [ $code -eq {timelimit} ] || [ $code -eq {preempted} ]; then\n"
    '  echo "pippa: attempt saved before the time limit (exit $code): requeued with --resume'
    ' (not counted in --retry)"\n'
    '  echo $((free + 1)) > "$RUN_DIR/{free}"\n'
    '  scontrol requeue "$SLURM_JOB_ID" && exit $code\n'
    "fi\n"
)
# A failed attempt (not a bad setting: exit 2, not a stop) with retries left requeues the job itself, and
# records no exit_code: the run goes on (PENDING, then RUNNING) in the same job id and run directory.
REQUEUE_LINE = (
    "n=$((${{SLURM_RESTART_COUNT:-0}} + 1 - ${{free:-0}}))\n"
    'if [ $code -ne 0 ] && [ $code -ne 2 ] && [ ! -e "$RUN_DIR/stop_requested" ] '
    "&& [ $n -le {retries} ]; then\n"
    '  echo "pippa: attempt $n/$(({retries} + 1)) failed (exit $code): '
    'requeued, attempt $((n + 1)) with --resume"\n'
    '  scontrol requeue "$SLURM_JOB_ID" && exit $code\n'
    "fi\n"
)


def render_sbatch(
    spec: SlurmSpec,
    run_id: str,
    remote_dir: str,
    command: str,
    env: dict[str, str],
    rendezvous: bool = True,
    retries: int = 0,
) -> str:
    """The batch script; ``command`` is the launch line (``launch_words``, its words already quoted),
    to which each srun task appends its machine rank and the rendezvous address (``rendezvous``; a
    ``--cmd`` job's shell line runs as it is, once per task). ``retries`` (``pippa run --retry N`` on a
    recipe): the job is ``--requeue``-able and requeues itself (``scontrol requeue``) after a failed
    attempt, up to N times, each later attempt with ``--resume`` (``SLURM_RESTART_COUNT`` > 0)."""
    run_dir = RunDir(remote_dir, run_id).path
    signal_s = spec.signal_s if rendezvous else 0  # a --cmd job has no checkpoint to save
    requeue = bool(retries or signal_s)
    head = "\n".join(
        directives(spec, run_id)
        + (["#SBATCH --requeue"] if requeue else [])
        + ([f"#SBATCH --signal=B:USR1@{signal_s}"] if signal_s else [])
    )
    meet = (
        'a=$1 p=$2; shift 2; exec "$@" --machines "$SLURM_NTASKS" --machine-rank "$SLURM_PROCID" '
        '--main-addr "$a" --main-port "$p"'
    )
    step = (
        f'sh -c {shlex.quote(meet)} sh "$MAIN_ADDR" "$MAIN_PORT" {command}'
        if rendezvous
        else f"sh -c {shlex.quote(command)}"
    ) + (" $RESUME" if requeue else "")
    container = ""
    if spec.container_image:  # Pyxis: the image, and the project directory mounted where it is
        where = sh_path(remote_dir)
        container = (
            f"--container-image={shlex.quote(spec.container_image)} --container-mounts={where} "
            f"--container-workdir={where} "
        )
    saved = SAVED_REQUEUE_LINE.format(
        free=rd.SLURM_FREE_REQUEUES,
        timelimit=ec.INFRA_EXIT[ec.TIMELIMIT],
        preempted=ec.INFRA_EXIT[ec.PREEMPTED],
    )
    script = render(
        rd.JOB_SBATCH,
        directives=head,
        run_id=run_id,
        run_id_word=shlex.quote(run_id),
        secrets_path=SECRETS_PATH,
        run_dir=sh_path(run_dir),
        remote_dir=sh_path(remote_dir),
        export_line=export_line(env),
        source_secrets=source_secrets_line(),
        port_base=str(PORT_BASE),
        port_span=str(PORT_SPAN),
        step=step,
        resume_line=RESUME_LINE if requeue else "",
        trap_line=TRAP_LINE if signal_s else "",
        container=container,
        wait_line=WAIT_BACKGROUND.format(timelimit=ec.INFRA_EXIT[ec.TIMELIMIT]) if signal_s else "\ncode=$?",
        requeue_line=(saved if signal_s else "")
        + (REQUEUE_LINE.format(retries=int(retries)) if retries else ""),
    )
    return in_template(spec, head, script) if spec.template else script


def in_template(spec: SlurmSpec, head: str, script: str) -> str:
    """pippa's script inside the cluster's own template: its directives at ``{{pippa_sbatch}}`` (after
    the template's own #SBATCH lines, before any command: sbatch reads no directive after one), the
    rest of it at ``{{pippa_job}}``."""
    text = template_text(spec.template)
    body = script.split(head + "\n", 1)[1]
    sbatch_part, job_part = TEMPLATE_PARTS
    return text.replace(sbatch_part, head).replace(job_part, body)
