"""``python -m training_core.launch RECIPE [--set ...] --run-dir DIR [--processes N] [--gpus 0-6] ...``.

The one entry point that starts training on a host, however many processes it takes. One process
(the default) runs ``python -m training_core.train`` itself; N processes write an accelerate config
file into the run directory (``accelerate.yaml``: DDP, or DeepSpeed ZeRO-2/3 with ``use_cpu`` on a host
without GPUs, so N gloo ranks really form one group) and run ``accelerate launch`` on it. Several hosts
(``--machines``, ``--machine-rank``, ``--main-addr``) rendezvous over c10d at the first host. The
launcher never trains or imports torch: it resolves the recipe (the same ``--set`` values go on to the
trainer), writes the file and replaces itself with the launch command (``--print`` shows it instead).

Two accelerate traps this avoids (tests/training/test_launch_dist.py proves both): ``--cpu
--num_processes 2`` silently starts ONE process, and ``--multi_gpu --num_processes 2`` on a host without
CUDA starts two ranks that each train alone unless the trainer is told ``use_cpu`` (grpo_args does so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pippa_contract import cgroupdeleg
from pippa_contract.rundir import ACCELERATE_YAML, VLLM_LOG
from training_core.config import LaunchConfig, RunConfig
from training_core.errors import BadSetting, TrainingError, UsageError
from training_core.hardware.gpu_ids import parse_gpus
from training_core.hardware.platform import PlatformFacts, detect
from training_core.hardware.precision import BF16_MODES
from training_core.recipes import resolve
from training_core.run.layout import EACH_HOST_ENV

CONFIG_NAME = ACCELERATE_YAML
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}$")


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks of a multi-host run meet: machine count, this host's rank, the first host's address."""

    machines: int = 1
    machine_rank: int = 0
    main_addr: str = "127.0.0.1"
    main_port: int = 0  # 0 = a free port (one host only; several hosts must agree on one)

    def check(self) -> None:
        if self.machines < 1 or not 0 <= self.machine_rank < self.machines:
            raise UsageError(f"machine rank {self.machine_rank} outside 0..{self.machines - 1}")
        if not _HOST_RE.match(self.main_addr):
            raise UsageError(f"bad rendezvous address {self.main_addr!r}")
        if self.machines > 1 and not 0 < self.main_port < 65536:
            raise UsageError("a run over several machines needs --main-port (1-65535), the same on all hosts")


def mixed_precision(launch: LaunchConfig, precision: str, facts: PlatformFacts) -> str:
    """accelerate's mixed precision from the model's: one precision per run, and "no" without a GPU
    (the trainer falls back to fp32 there, training_core.hardware.platform.train_precision)."""
    derived = (
        "no"
        if facts.gpu_count == 0
        else {**dict.fromkeys(BF16_MODES, "bf16"), "fp16": "fp16"}.get(precision, "no")
    )
    if launch.mixed_precision not in ("auto", derived) and facts.gpu_count > 0:
        raise BadSetting(
            f"launch.mixed_precision={launch.mixed_precision} contradicts model.precision={precision} "
            f"(which means {derived!r}); set model.precision instead"
        )
    return derived


def accelerate_config(
    launch: LaunchConfig, precision: str, facts: PlatformFacts, rdv: Rendezvous = Rendezvous()
) -> dict[str, object]:
    """The accelerate config file's content (written as YAML by ``write_config``)."""
    cpu = facts.gpu_count == 0
    gpus = parse_gpus(launch.gpus)
    total = launch.processes * rdv.machines
    cfg: dict[str, object] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "num_machines": rdv.machines,
        "machine_rank": rdv.machine_rank,
        "num_processes": total,  # accelerate counts every rank of every machine
        "mixed_precision": mixed_precision(launch, precision, facts),
        "use_cpu": cpu,
        "main_process_port": rdv.main_port,
        "rdzv_backend": "c10d" if rdv.machines > 1 else "static",
        "same_network": False,
        "main_training_function": "main",
        "downcast_bf16": "no",
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
    }
    if rdv.machines > 1:
        cfg["main_process_ip"] = rdv.main_addr
    if gpus and not cpu:
        cfg["gpu_ids"] = ",".join(map(str, gpus))
    if launch.strategy == "ddp":
        cfg["distributed_type"] = "MULTI_GPU"  # also on CPU: its torchrun launcher starts N ranks
    else:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {
            "zero_stage": 3 if launch.strategy == "zero3" else 2,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": False,
            "zero3_save_16bit_model": launch.strategy == "zero3",
            "gradient_accumulation_steps": "auto",  # the trainer's value (one source of truth)
            "gradient_clipping": "auto",
            # torchrun on every machine (srun / pippa start one launcher per host), never pdsh
            "deepspeed_multinode_launcher": "standard",
        }
    return cfg


def check(launch: LaunchConfig, facts: PlatformFacts) -> None:
    if launch.processes < 1:
        raise BadSetting(f"bad value for launch.processes: must be >= 1, got {launch.processes}")
    gpus = parse_gpus(launch.gpus)
    if facts.gpu_count:
        bad = [g for g in gpus if g >= facts.gpu_count]
        if bad:
            n = facts.gpu_count
            raise BadSetting(f"GPU {bad[0]} does not exist: this host has {n} (0-{n - 1})")
        usable = len(gpus) or facts.gpu_count
        if launch.processes > usable:
            raise BadSetting(
                f"launch.processes={launch.processes} but only {usable} GPU(s) "
                + (f"in --gpus {launch.gpus}" if gpus else "on this host")
                + ": one process per GPU"
            )


def to_yaml(cfg: dict[str, object], indent: str = "") -> str:
    """The tiny YAML subset accelerate's config needs (flat scalars, one nested table); no PyYAML here."""
    lines = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(to_yaml(value, indent + "  ").rstrip("\n"))
        elif isinstance(value, bool):
            lines.append(f"{indent}{key}: {'true' if value else 'false'}")
        elif isinstance(value, (int, float)):
            lines.append(f"{indent}{key}: {value}")
        else:
            lines.append(f"{indent}{key}: {_yaml_str(str(value))}")
    return "\n".join(lines) + "\n"


def _yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def train_argv(recipe: str, sets: list[str], run_dir: Path, resume: bool) -> list[str]:
    """``training_core.train``'s arguments after ``-m training_core.train``."""
    argv = [recipe]
    for s in sets:
        argv += ["--set", s]
    argv += ["--run-dir", str(run_dir)]
    if resume:
        argv.append("--resume")
    return argv


@dataclass(frozen=True)
class Plan:
    """How this host starts the run: the argv to exec, environment additions, and the accelerate config
    to write first (None for a single process)."""

    argv: list[str]
    env: dict[str, str]
    config: dict[str, object] | None


def plan(
    recipe: str,
    sets: list[str],
    run_dir: Path,
    resume: bool,
    launch: LaunchConfig,
    precision: str,
    facts: PlatformFacts,
    rdv: Rendezvous = Rendezvous(),
    python: str = sys.executable,
) -> Plan:
    check(launch, facts)
    rdv.check()
    train = ["-m", "training_core.train", *train_argv(recipe, sets, run_dir, resume)]
    if launch.processes == 1 and rdv.machines == 1:
        gpus = parse_gpus(launch.gpus)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if gpus else {}
        return Plan([python, *train], env, None)
    cfg = accelerate_config(launch, precision, facts, rdv)
    argv = [python, "-m", "accelerate.commands.launch", "--config_file", str(run_dir / config_name(rdv))]
    # OMP threads per rank: accelerate would otherwise set cores / ranks, ignoring other runs on the host
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")} if facts.gpu_count == 0 else {}
    return Plan([*argv, *train], env, cfg)


def sandbox_scope(
    cfg: RunConfig,
    euid: int | None = None,
    where: cgroupdeleg.Plan | str | None = None,
    check: Callable[[], str] = cgroupdeleg.user_scope,
    env: dict[str, str] | None = None,
) -> tuple[list[str], str]:
    """(prefix, line): an ordinary user's strict code run on a cgroup v2 host whose own cgroup is not
    delegated starts in a delegated systemd user scope (``cgroupdeleg.scope_argv``), where the user's
    manager gives one (``check``); otherwise no prefix, and the trainer's sandbox refuses at strict with
    its one line (``line`` says why the scope was not used). Never under SLURM: a scope of the user's
    manager would take the trainer out of the job's cgroup (its limits, GPUs and kill on cancel). Any
    other run: ([], "")."""
    from training_core.methods.trl_run import runs_model_code

    if cfg.sandbox.isolation != "strict" or not runs_model_code(cfg):
        return [], ""
    euid = os.geteuid() if euid is None else euid
    where = cgroupdeleg.plan(euid=euid) if where is None else where
    if not cgroupdeleg.wants_scope(where, euid):
        return [], ""
    slurm = "SLURM_JOB_ID" in (os.environ if env is None else env)
    why = "a SLURM job keeps its cgroup" if slurm else check()
    if why:
        return [], f"sandbox: no delegated cgroup for isolation = strict ({where}; {why})"
    return cgroupdeleg.scope_argv(), "sandbox: the trainer starts in a delegated systemd user scope (v2)"


def config_name(rdv: Rendezvous) -> str:
    """One file per machine: with a shared run directory (SLURM) each launcher writes its own rank."""
    return CONFIG_NAME if rdv.machines == 1 else f"accelerate.machine{rdv.machine_rank}.yaml"


def write_config(run_dir: Path, cfg: dict[str, object], name: str = CONFIG_NAME) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / name
    tmp = path.with_name(f".{name}.tmp")
    tmp.write_text(to_yaml(cfg), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training_core.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", help="recipe name in recipes/ or a path to a .toml file")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable); passed on to the trainer",
    )
    p.add_argument("--run-dir", type=Path, default=None, help="run directory (default runs/<run-id>)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run dir")
    p.add_argument("--processes", type=int, default=None, help="processes on this host (launch.processes)")
    p.add_argument("--strategy", choices=("ddp", "zero2", "zero3"), default=None, help="launch.strategy")
    p.add_argument("--gpus", default=None, help="GPU ids for this run, e.g. 0-6 or 0,2 (launch.gpus)")
    p.add_argument("--machines", type=int, default=1, help="hosts the run spans (one launcher per host)")
    p.add_argument("--machine-rank", type=int, default=0, help="this host's rank, 0 = the rendezvous host")
    p.add_argument("--main-addr", default="127.0.0.1", help="address of machine rank 0 (c10d rendezvous)")
    p.add_argument("--main-port", type=int, default=0, help="rendezvous port (0 = free port, one host only)")
    p.add_argument(
        "--checkpoint-each-host",
        action="store_true",
        help="no shared file system: every host keeps a whole checkpoint (save_on_each_node)",
    )
    p.add_argument("--print", action="store_true", help="write the config, print the command, do not run it")
    p.add_argument("--debug", action="store_true", help="print the traceback of an error, not only its line")
    return p


def main(argv: list[str] | None = None, facts: PlatformFacts | None = None) -> int:
    args = _parser().parse_args(argv)
    sets = list(args.sets)
    for key, value in (("processes", args.processes), ("strategy", args.strategy), ("gpus", args.gpus)):
        if value is not None:
            sets.append(f"launch.{key}={json.dumps(value)}")
    try:
        facts = facts or detect(offline_probe=False)
        res = resolve(args.recipe, sets, facts)
        from pippa_contract.names import new_run_id

        run_dir = (args.run_dir or Path("runs") / new_run_id(args.recipe)).resolve()
        rdv = Rendezvous(args.machines, args.machine_rank, args.main_addr, args.main_port)
        cfg = res.config
        server_mode = cfg.train.use_vllm is True and cfg.train.vllm_mode == "server"
        server = _server(cfg, facts, run_dir) if server_mode else None
        train = server[0] if server is not None else cfg.launch  # server mode: the GPUs left to train
        p = plan(args.recipe, sets, run_dir, args.resume, train, cfg.model.precision, facts, rdv)
        if args.checkpoint_each_host:
            p = dataclasses.replace(p, env={**p.env, EACH_HOST_ENV: "1"})
        scope, scope_line = sandbox_scope(cfg)
        if scope:
            env = {**p.env, **cgroupdeleg.scope_env(os.environ)}  # the user manager's bus
            p = dataclasses.replace(p, argv=[*scope, *p.argv], env=env)
    except TrainingError as e:
        if args.debug:
            traceback.print_exception(e)
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if p.config is not None:
        write_config(run_dir, p.config, config_name(rdv))
    if args.print:
        import shlex

        if server is not None:
            print(shlex.join([*(f"{k}={v}" for k, v in server[2].items()), *server[1]]))
        print(shlex.join([*(f"{k}={v}" for k, v in p.env.items()), *p.argv]))
        return 0
    if scope_line:
        print(scope_line)
    sys.stdout.flush()
    if server is not None:
        from training_core.generation import vllm_server

        _, serve, serve_env = server
        health = f"http://127.0.0.1:{cfg.launch.vllm_port}/health"
        return vllm_server.supervise(
            serve,
            {**os.environ, **serve_env},
            p.argv,
            {**os.environ, **p.env},
            health,
            run_dir / VLLM_LOG,
            cfg.launch.vllm_timeout_s,
        )
    os.execvpe(p.argv[0], p.argv, {**os.environ, **p.env})


def _server(
    cfg: RunConfig, facts: PlatformFacts, run_dir: Path
) -> tuple[LaunchConfig, list[str], dict[str, str]]:
    """vLLM server mode: the trainer's launch settings on the GPUs left over, the server's argv and env."""
    from training_core.generation import vllm_server

    split = vllm_server.split_gpus(cfg.launch, facts.gpu_count)
    train = dataclasses.replace(cfg.launch, gpus=",".join(map(str, split.train)))
    serve = vllm_server.serve_argv(
        sys.executable, cfg.model.name, split.tensor_parallel, cfg.launch.vllm_port, cfg.launch.vllm_args
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    return train, serve, {"CUDA_VISIBLE_DEVICES": ",".join(map(str, split.serve))}


if __name__ == "__main__":
    sys.exit(main())
