"""TRL's trainers configured from a RunConfig, subclassed only for crash-safe checkpoints.

``grpo_args`` is the single place where our settings become TRL's (Dr GRPO: ``loss_type="dr_grpo"``,
``scale_rewards="none"``, ``beta=0.0``, pinned ``max_completion_length``; Liu et al. 2025).
``stop_callback`` turns a stop signal into a checkpoint of the current step.
``AtomicCheckpoints`` (in every method's trainer: GRPO here, SFT and DPO in training_core.methods.supervised)
overrides nothing of the Trainer's: the trainer's ``output_dir`` is ``checkpoints/.staging``, where
TRL/transformers write the usual ``checkpoint-<step>`` (model, optimizer, scheduler, RNG, trainer
state) through their own save path, and a callback's ``on_save`` (run right after that save) renames
the finished directory into ``checkpoints/``, so a kill at any moment leaves no half-written
``checkpoint-<step>``; it then keeps the newest ``checkpoint.keep``.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from training_core.config import RunConfig
from training_core.generation.choice import EngineChoice
from training_core.run.layout import STAGING, checkpoint_name, checkpoints, checkpoints_dir
from training_core.samples_trl import RecordSamples

# TRL 1.16 itself still calls transformers' pre-v6 checkpointing names; the FutureWarning is about
# library internals a user cannot act on, and it lands in every run's log. Anything else warns as usual.
warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing", category=FutureWarning)


def training_args(
    cfg: RunConfig, run_dir: Path, report_to: list[str], run_name: str, config_cls: Any
) -> dict[str, Any]:
    """The transformers TrainingArguments every method shares (optimizer, schedule, batch, precision,
    checkpoints, logging), keyed for ``config_cls`` (GRPOConfig, SFTConfig or DPOConfig)."""
    t, m = cfg.train, cfg.model
    # transformers 5.18+ renamed gradient checkpointing to activation_checkpointing; the [vllm] install
    # set holds transformers at 5.17 (vLLM's cap), so use whichever name this version has.
    new_name = "activation_checkpointing" in {f.name for f in dataclasses.fields(config_cls)}
    return {
        "activation_checkpointing" if new_name else "gradient_checkpointing": m.gradient_checkpointing,
        # TRL/transformers save here; PublishCheckpoints moves each finished checkpoint up into checkpoints/
        "output_dir": str(checkpoints_dir(run_dir) / STAGING),
        "run_name": run_name,
        "seed": cfg.seed,
        "num_train_epochs": t.num_train_epochs,
        "max_steps": t.max_steps,
        "learning_rate": t.learning_rate,
        "warmup_steps": t.warmup_ratio,  # transformers 5: a float < 1 is a ratio of total steps
        "weight_decay": t.weight_decay,
        "lr_scheduler_type": t.lr_scheduler_type,
        "max_grad_norm": t.max_grad_norm,
        "optim": t.optim,
        "per_device_train_batch_size": t.per_device_train_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "dataloader_num_workers": t.dataloader_num_workers,
        # Pinned host memory only helps copies to a GPU; on CPU torch warns about it at every run.
        "dataloader_pin_memory": torch.cuda.is_available(),
        # Without CUDA the ranks of `accelerate launch` (torchrun) must be told they are CPU ranks, or each
        # trains alone: transformers only then builds the gloo group (training_core.launch).
        "use_cpu": not torch.cuda.is_available(),
        # Every trainable weight takes part in each forward (full model or LoRA): no extra graph walk.
        "ddp_find_unused_parameters": False,
        "logging_steps": t.logging_steps,
        "bf16": m.precision in ("bf16", "bf16_amp"),
        "fp16": m.precision == "fp16",
        "save_strategy": "steps" if cfg.checkpoint.every > 0 else "no",
        "save_steps": max(1, cfg.checkpoint.every),
        "save_total_limit": None,  # rotation happens after the atomic rename (below)
        "report_to": report_to,
        "disable_tqdm": True,
    }


def grpo_args(cfg: RunConfig, run_dir: Path, report_to: list[str], run_name: str) -> GRPOConfig:
    t = cfg.train
    extra: dict[str, Any] = {}
    if t.generation_batch_size:
        extra["generation_batch_size"] = t.generation_batch_size
    if t.use_vllm:
        extra.update(vllm_mode=t.vllm_mode, vllm_gpu_memory_utilization=t.vllm_gpu_memory_utilization)
    if t.use_vllm and t.vllm_mode == "server":  # the server training_core.launch started and waited for
        extra.update(vllm_server_host="127.0.0.1", vllm_server_port=cfg.launch.vllm_port,
                     vllm_server_timeout=cfg.launch.vllm_timeout_s)  # fmt: skip
    return GRPOConfig(
        **training_args(cfg, run_dir, report_to, run_name, GRPOConfig),
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        beta=t.beta,
        num_generations=t.num_generations,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        epsilon=t.epsilon,
        num_iterations=t.num_iterations,
        use_vllm=bool(t.use_vllm),
        mask_truncated_completions=t.mask_truncated_completions,
        log_completions=False,
        reward_weights=[r.weight for r in cfg.rewards],
        **extra,
    )


class AtomicCheckpoints:
    """Mixin for a transformers Trainer: checkpoints appear whole or not at all, the newest ``keep`` kept.
    It only adds a callback (``PublishCheckpoints``) after the Trainer's own constructor."""

    keep_checkpoints: int = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.add_callback(PublishCheckpoints(self))  # type: ignore[attr-defined]


class PublishCheckpoints(TrainerCallback):  # type: ignore[misc]
    """Moves each checkpoint the trainer finished writing in ``<output_dir>`` (``checkpoints/.staging``)
    into ``checkpoints/`` with one rename. transformers calls ``on_save`` right after its
    ``_save_checkpoint`` returns (Trainer._maybe_log_save_evaluate), before any later callback's
    ``on_save`` (the stop callback's, added after this one, may end the run there)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if args.should_save:
            shutil.rmtree(args.output_dir, ignore_errors=True)  # leftovers of a killed save

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # every rank wrote into staging (its RNG state; DeepSpeed its shard): the saving process renames
        # the finished directory once all are done, between barriers (no-ops for one process)
        acc = self.trainer.accelerator
        acc.wait_for_everyone()
        if args.should_save:
            publish(Path(args.output_dir), state.global_step, self.trainer.keep_checkpoints)
        acc.wait_for_everyone()


def publish(staging: Path, step: int, keep: int) -> None:
    """``staging/checkpoint-<step>`` renamed to ``staging/../checkpoint-<step>``; TRL's model card
    (README.md) moved beside it; staging removed; all but the newest ``keep`` checkpoints deleted."""
    final_root = staging.parent
    name = checkpoint_name(step)
    target = final_root / name
    if target.exists():
        shutil.rmtree(target)
    (staging / name).rename(target)
    card = staging / "README.md"
    if card.exists():
        card.replace(final_root / "README.md")
    shutil.rmtree(staging, ignore_errors=True)
    for _, old in checkpoints(final_root)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)


class PippaGRPOTrainer(AtomicCheckpoints, RecordSamples, EngineChoice, GRPOTrainer):  # type: ignore[misc]
    """Atomic checkpoints, a sample of some steps' batches in samples.jsonl (``samples``), and the
    generation engine of ``generation=`` (a Plan; training_core.generation) with its one-line fallback."""


def stop_callback(
    requested: Callable[[], int | None], agree: Callable[[bool], bool] = bool
) -> TrainerCallback:
    """Once ``requested()`` names a signal: save a checkpoint at the end of the current step (through
    TrainerControl, the public way), then raise KeyboardInterrupt from ``on_save`` so the run ends as
    interrupted without the end-of-training work (final eval, final save). With several ranks,
    ``agree(flag)`` is True when any rank's flag is (one all-reduce per step): every rank then saves the
    same step, as the collective checkpoint needs, though the signal reached them at different times."""

    class SaveThenStop(TrainerCallback):  # type: ignore[misc]
        stopping = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if agree(requested() is not None):
                self.stopping = True
                control.should_save = True

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.stopping and state.global_step < state.max_steps:  # the last step just completes
                raise KeyboardInterrupt(f"signal {requested() or 'on another rank'}")

    return SaveThenStop()


# What transformers' Trainer logs when a resumed checkpoint lacks weights it did not save: with tied
# word embeddings, lm_head.weight is the embedding matrix, saved once and tied again after the load
# (transformers trainer.py `_issue_warnings_after_load`). That one message, for that one key, is expected.
TIED_HEAD_WARNING = "There were missing keys in the checkpoint model loaded: ['lm_head.weight']."


class _ExpectedTiedHead(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != TIED_HEAD_WARNING


def quiet_tied_head_warning(model: Any) -> None:
    """Silence TIED_HEAD_WARNING on resume for a model whose output head is tied to its embeddings
    (any other missing key still warns)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "tie_word_embeddings", False):
        logging.getLogger("transformers.trainer").addFilter(_ExpectedTiedHead())
