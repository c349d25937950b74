"""One training run: load model and data, wire metrics / eval / checkpoints around TRL, record the end.

The run writes ``<run-dir>/metrics.jsonl`` (header, steps, evals, end) and
``<run-dir>/checkpoints/checkpoint-<step>``. Every way out writes an end line: completed,
interrupted (SIGINT / SIGTERM, exit 130; with checkpointing on, after saving the current step's
checkpoint) or failed (exception, exit 1). Only SIGKILL leaves no end line. ``--resume`` continues from
the newest checkpoint into the same metrics file, after moving the lines it will redo to
``metrics.superseded.jsonl`` (docs/CONTRACTS.md).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from training_core.divergence import Diverged
from training_core.errors import StartFailed, TrainingError, UsageError
from training_core.platform import PlatformFacts, apply_offline_env, detect, torch_facts, train_precision
from training_core.recipes import Resolved

# TRL 1.16 itself still calls transformers' pre-v6 checkpointing names; the FutureWarning is about
# library internals a user cannot act on, and it lands in every run's log. Anything else warns as usual.
warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing", category=FutureWarning)


class _StopOnSignal:
    """SIGINT / SIGTERM handler. With checkpointing on, the first signal asks the trainer to finish the
    current step, save ``checkpoint-<step>`` and stop (``trainer.stop_callback``), so ``--resume``
    continues from the exact step; a second signal, or any signal with checkpointing off, stops at once."""

    def __init__(self, save: bool) -> None:
        self.save = save
        self.requested: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.save and self.requested is None:
            self.requested = signum
            print(
                f"signal {signum}: saving a checkpoint after this step, then stopping "
                "(signal again to stop now)",
                file=sys.stderr,
                flush=True,
            )
            return
        raise KeyboardInterrupt(f"signal {signum}")


def wandb_mode() -> str | None:
    """W&B online with a key, offline when asked, off otherwise (never an interactive login prompt)."""
    if os.environ.get("WANDB_MODE") in ("disabled",):
        return None
    if os.environ.get("WANDB_MODE") == "offline":
        return "offline"
    return "online" if os.environ.get("WANDB_API_KEY") else None


def _start_wandb(res: Resolved, run_dir: Path, resume_id: str | None) -> dict[str, Any] | None:
    mode = wandb_mode()
    if mode is None:
        return None
    import wandb

    log = res.config.logging
    run = wandb.init(
        project=log.wandb_project or os.environ.get("WANDB_PROJECT") or "pippa",
        entity=log.wandb_entity or os.environ.get("WANDB_ENTITY") or None,
        name=run_dir.name,
        id=resume_id,
        resume="allow" if resume_id else None,
        mode=mode,  # type: ignore[arg-type]
        config=res.as_dict(),
        dir=os.environ.get("WANDB_DIR") or str(run_dir),
    )
    url = None if mode == "offline" else run.url
    return {"id": run.id, "url": url, "mode": mode}


def _load_model(res: Resolved, facts: PlatformFacts) -> tuple[Any, Any]:
    """Tokenizer and model, the weights in the dtype the run trains in: bf16 for ``bf16`` (what
    torch can do decides, ``train_precision``), fp32 for the autocast modes and the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core import tiny

    m = res.config.model
    precision, note = train_precision(m.precision, facts, torch_facts())
    if note:
        print(note, flush=True)
    m.precision = precision  # type: ignore[assignment]  # grpo_args and the header see what runs

    name = res.config.model.name
    if name != "tiny" and _looks_like_path(name) and not Path(name).expanduser().exists():
        raise UsageError(f"model path not found: {name}")
    if name == "tiny":
        name = str(tiny.ensure())
    elif _looks_like_path(name):
        name = str(Path(name).expanduser())
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model, tokenizer


def run_checkpoint(runs_dir: Path, run_id: str) -> Path:
    """The newest checkpoint of run ``run_id`` beside this run (``model.from_run``): SFT, then GRPO."""
    from training_core.checkpoints import newest_checkpoint

    ckpt = newest_checkpoint(runs_dir / run_id / "checkpoints")
    if ckpt is None:
        where = runs_dir / run_id
        raise UsageError(
            f"model.from_run: no checkpoint in {where / 'checkpoints'}"
            if where.is_dir()
            else f"model.from_run: no run {run_id} in {runs_dir}"
        )
    return ckpt


def _looks_like_path(name: str) -> bool:
    """A local directory rather than a hub id ("org/name" has exactly one slash and no leading dot)."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or Path(name).exists()


def first_line(e: BaseException) -> str:
    """``Type: first line of the message``: HF errors span paragraphs, a run's end line wants one."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@dataclass
class _Started:
    """What the setup phase has opened so far, so a failure can still close the record it began."""

    writer: Any = None
    wandb_info: dict[str, Any] | None = None
    resumed_step: int | None = None
    resume_from: Path | None = None


def run(res: Resolved, run_dir: Path, resume: bool = False) -> int:
    """Set up and train. A failure before the first step (model or data that does not load) still
    writes a header and a ``failed`` end line, then raises: a TrainingError as itself, anything else as
    StartFailed, which the entry point prints as one line (the traceback only with --debug)."""
    started = _Started()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        trainer, n_rows, n_params = _prepare(res, run_dir, resume, started)
    except BaseException as e:
        error = str(e) if isinstance(e, TrainingError) else first_line(e)
        _record_failed_start(res, run_dir, started, error, isinstance(e, KeyboardInterrupt))
        if isinstance(e, (TrainingError, KeyboardInterrupt)):
            raise
        raise StartFailed(f"run {run_dir.name} failed before its first step: {error}") from e
    return _train(res, run_dir, trainer, started, n_rows, n_params)


def _record_failed_start(
    res: Resolved, run_dir: Path, started: _Started, error: str, interrupted: bool
) -> None:
    from training_core import metrics

    if metrics.process_rank() != 0:
        return  # rank 0 records the run
    writer = started.writer
    if writer is None or not writer.active:
        writer = metrics.MetricsWriter(run_dir / "metrics.jsonl")
        writer.header(run_dir.name, res.recipe, res.as_dict(), started.wandb_info, started.resumed_step)
    status = "interrupted" if interrupted else "failed"
    writer.end(status, started.resumed_step or 0, None if interrupted else error)
    writer.close()
    if started.wandb_info:
        import wandb

        wandb.finish(exit_code=130 if interrupted else 1)


def _prepare(res: Resolved, run_dir: Path, resume: bool, started: _Started) -> tuple[Any, int, int]:
    """Everything before the first step: model, data, metrics header, W&B, rewards, eval, trainer."""
    cfg = res.config
    facts = detect(offline_probe=cfg.model.name != "tiny")
    apply_offline_env(facts)
    # HF libraries read the offline switches at import time: set them before importing them.
    from transformers import PrinterCallback, set_seed
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" / "Writing model shards" bars clutter the run's log

    from training_core import callbacks as cb_registry
    from training_core import metrics, sandbox
    from training_core.checkpoints import newest_checkpoint
    from training_core.data.loaders import build_dataset, load_rows
    from training_core.eval import greedy as evaluation
    from training_core.eval.tasks import EVAL_TASKS
    from training_core.rewards import registry
    from training_core.trainer import PippaGRPOTrainer, grpo_args

    ckpt_dir = run_dir / "checkpoints"
    resume_from = newest_checkpoint(ckpt_dir) if resume else None
    if resume and resume_from is None:
        print(f"resume: no checkpoint in {ckpt_dir}; starting from step 0", flush=True)
    started.resumed_step = int(resume_from.name.split("-")[1]) if resume_from else None
    metrics_path = run_dir / "metrics.jsonl"
    main = metrics.process_rank() == 0  # one metrics.jsonl and one W&B run per run, from rank 0
    if resume and main:
        # The lines the resumed run redoes go to metrics.superseded.jsonl: one row per step for readers.
        moved = metrics.supersede(metrics_path, -1 if started.resumed_step is None else started.resumed_step)
        if moved:
            print(f"resume: moved {moved} redone lines to metrics.superseded.jsonl", flush=True)

    set_seed(cfg.seed)
    if cfg.model.from_run:
        cfg.model.name = str(run_checkpoint(run_dir.parent, cfg.model.from_run))  # the header shows it
    model, tokenizer = _load_model(res, facts)
    rows = load_rows(cfg.data, cfg.seed, plugins=cfg.plugins)
    grpo = cfg.method == "grpo"
    if grpo:
        train_rows = build_dataset(rows, cfg.data, tokenizer)
    else:
        from training_core.data.pairs import method_rows

        train_rows = method_rows(rows, cfg, tokenizer)
    t = cfg.train
    prompts_per_gen = t.generation_batch_size or t.per_device_train_batch_size * t.gradient_accumulation_steps
    if grpo and prompts_per_gen // t.num_generations > len(train_rows):
        raise UsageError(
            f"a generation batch needs {prompts_per_gen // t.num_generations} prompts but the dataset has "
            f"{len(train_rows)}; lower train.per_device_train_batch_size or add rows"
        )
    import datasets

    train_ds = datasets.Dataset.from_list(train_rows)

    if main:
        started.wandb_info = wandb_info = _start_wandb(
            res, run_dir, metrics.previous_wandb_id(metrics_path) if resume else None
        )
        # TRL's own W&B callback stays off (report_to none): it would log TRL's key names ("train/reward");
        # the writer mirrors every step and eval record under the metrics.jsonl names instead.
        mirror = metrics.wandb_mirror if wandb_info else None
        started.writer = writer = metrics.MetricsWriter(metrics_path, mirror=mirror)
        writer.header(run_dir.name, res.recipe, res.as_dict(), wandb_info, started.resumed_step)
    else:
        started.writer = writer = metrics.NullWriter()

    # model-written code runs only under real isolation unless the recipe says "unsafe" (the header
    # above records the setting; the sandbox refuses with one line naming what to install otherwise)
    sandbox.set_level(cfg.sandbox.isolation)
    if cfg.sandbox.isolation == "unsafe":
        print("sandbox: isolation = unsafe (recipe setting): model-written code runs without namespaces",
              flush=True)
    if _runs_model_code(cfg):
        # found now, not at the first reward: a sandbox that cannot keep its promises stops the run here,
        # with one line, and the header shows what every program will run under (mode, caps, seccomp)
        print(sandbox.detect().isolation.header(), flush=True)
    rctx = registry.RewardContext(model=model, tokenizer=tokenizer, run_dir=str(run_dir), config=cfg)
    reward_funcs = [registry.build(r.name, r.params, rctx, cfg.plugins) for r in cfg.rewards] if grpo else []
    n_params = sum(p.numel() for p in model.parameters())
    cbs: list[Any] = [metrics.make_callback(writer, cfg.logging.progress and main, n_params, facts.gpu_name)]
    if cfg.eval.task != "none":
        task = EVAL_TASKS.get(cfg.eval.task, cfg.plugins)
        eval_rows = task.load(cfg.eval.n, cfg.seed, data=cfg.data, **cfg.eval.params)
        max_new = cfg.eval.max_new_tokens or t.max_completion_length
        cbs.append(evaluation.make_callback(task, eval_rows, cfg.eval, cfg.data, max_new, tokenizer, writer))
    cctx = cb_registry.CallbackContext(tokenizer=tokenizer, writer=writer, run_dir=str(run_dir), config=cfg)
    for spec in cfg.callbacks:
        cbs.append(cb_registry.CALLBACKS.get(spec.name, cfg.plugins)(cctx, **spec.params))

    peft_config = None
    if cfg.model.lora_r > 0:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=cfg.model.lora_r,
            lora_alpha=cfg.model.lora_alpha,
            lora_dropout=cfg.model.lora_dropout,
            task_type="CAUSAL_LM",
        )
    if grpo:
        trainer = PippaGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=reward_funcs,  # type: ignore[arg-type]
            args=grpo_args(cfg, run_dir, ["none"], run_dir.name),
            train_dataset=train_ds,
            callbacks=cbs,
            peft_config=peft_config,
        )
    else:
        from training_core.supervised import build_trainer

        trainer = build_trainer(cfg, run_dir, model, tokenizer, train_ds, cbs, peft_config)
    trainer.keep_checkpoints = cfg.checkpoint.keep
    trainer.remove_callback(PrinterCallback)  # our progress line replaces its raw dict dump
    started.resume_from = resume_from
    return trainer, len(train_rows), n_params


def _train(res: Resolved, run_dir: Path, trainer: Any, started: _Started, n_rows: int, n_params: int) -> int:
    t, writer, wandb_info = res.config.train, started.writer, started.wandb_info
    resumed_step, resume_from = started.resumed_step, started.resume_from

    main = writer.active
    if main:
        world = trainer.accelerator.num_processes
        print(
            f"run {run_dir.name}: recipe {res.recipe}, platform {res.platform['name']}, "
            f"{f'loss {t.loss_type}' if res.config.method == 'grpo' else res.config.method}, "
            f"{n_params / 1e6:.2f}M params, {n_rows} prompts"
            + (f", {world} processes ({res.config.launch.strategy})" if world > 1 else "")
            + (f", resuming from step {resumed_step}" if resumed_step else ""),
            flush=True,
        )
    from training_core.trainer import stop_callback

    handler = _StopOnSignal(save=res.config.checkpoint.every > 0)
    trainer.add_callback(stop_callback(lambda: handler.requested, _any_rank(trainer)))
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    status, error, code = "failed", None, 1
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        status, code = "completed", 0
    except KeyboardInterrupt as e:
        status, error, code = "interrupted", str(e) or "interrupted", 130
        print(f"interrupted at step {trainer.state.global_step}", file=sys.stderr, flush=True)
    except Diverged as e:  # no checkpoint: it would hold the broken weights
        status, error, code = "diverged", str(e), e.exit_code
        print(f"error: {e}", file=sys.stderr, flush=True)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        writer.end(status, trainer.state.global_step, error)
        writer.close()
        if wandb_info:
            import wandb

            wandb.finish(exit_code=code)
    if main:
        print(f"run {run_dir.name} {status} at step {trainer.state.global_step}", flush=True)
    return code


def _any_rank(trainer: Any) -> Any:
    """``flag -> bool``: True when any rank's flag is; plain ``bool`` for one process."""
    acc = trainer.accelerator
    if acc.num_processes == 1:
        return bool

    def agree(flag: bool) -> bool:
        import torch

        return bool(acc.reduce(torch.tensor([float(flag)], device=acc.device), reduction="sum").item() > 0)

    return agree


_CODE_REWARDS = ("code_execution", "test_cases", "assert_tests", "code_game")


def _runs_model_code(cfg: Any) -> bool:
    """Whether this recipe runs model-written code (a code reward, the MBPP evaluation or callback)."""
    return (any(r.name in _CODE_REWARDS for r in cfg.rewards) or cfg.eval.task == "mbpp"
            or any(c.name == "mbpp_eval" for c in cfg.callbacks))
