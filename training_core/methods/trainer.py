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

import collections
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from pippa_contract.checkpoint_check import write_manifest
from training_core.config import RunConfig
from training_core.generation.choice import EngineChoice
from training_core.hardware.precision import BF16_MODES
from training_core.methods.precision_hooks import PrecisionHooks
from training_core.methods.samples_trl import RecordSamples
from training_core.run.layout import (
    EACH_HOST_ENV,
    SAVES,
    STAGING,
    checkpoint_name,
    checkpoints,
    checkpoints_dir,
)

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
        "bf16": m.precision in BF16_MODES,
        "fp16": m.precision == "fp16",
        "save_strategy": "steps" if cfg.checkpoint.every > 0 else "no",
        "save_steps": max(1, cfg.checkpoint.every),
        "save_total_limit": None,  # rotation happens after the atomic rename (below)
        # a run over several hosts without a shared file system (training_core.launch
        # --checkpoint-each-host): each host's first process saves the whole checkpoint (DDP: the model and
        # optimizer are the same on every rank), so every host resumes from its own disk
        "save_on_each_node": os.environ.get(EACH_HOST_ENV) == "1",
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
        extra.update(
            vllm_server_host="127.0.0.1",
            vllm_server_port=cfg.launch.vllm_port,
            vllm_server_timeout=cfg.launch.vllm_timeout_s,
        )
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


class Manifests:
    """Writes each published checkpoint's manifest (pippa_contract.checkpoint_check) in a thread of its
    own, in order, while training goes on: hashing reads every byte the save wrote, which for a large
    model takes about as long as the save. The thread ends when nothing is left to do and is not a
    daemon, so the interpreter waits for the last manifest before the process exits (a stop included);
    a kill before it leaves that checkpoint without one (judged by its files' structure). A checkpoint
    removed or replaced meanwhile gets none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[Path, int]] = collections.deque()
        self._thread: threading.Thread | None = None

    def submit(self, ckpt: Path) -> None:
        with self._lock:
            self._pending.append((ckpt, ckpt.stat().st_ino))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="pippa-manifests")
                self._thread.start()

    def close(self) -> None:
        """Wait for the manifests asked for so far."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
                ckpt, inode = self._pending.popleft()
            with contextlib.suppress(OSError):  # rotated away or replaced meanwhile: no manifest
                write_manifest(str(ckpt), inode)


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
    ``on_save`` (the stop callback's, added after this one, may end the run there).

    It also times each save for the ledger's checkpoint part (pippa_contract.ledger): transformers
    saves right after the step's last callback (its end, its log, its eval), so a save spans from the
    last of those to the rename, one line in the run's saves.jsonl."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.mark = time.time()  # the last callback before a save would start
        self.manifests = Manifests()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.mark = time.time()

    def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.mark = time.time()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.mark = time.time()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if args.should_save:
            shutil.rmtree(args.output_dir, ignore_errors=True)  # leftovers of a killed save

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # every rank wrote into staging (its RNG state; DeepSpeed its shard): the saving process renames
        # the finished directory once all are done, between barriers (no-ops for one process)
        acc = self.trainer.accelerator
        if args.save_on_each_node and args.should_save and args.process_index != 0:
            write_weights(
                acc.unwrap_model(self.trainer.model),
                Path(args.output_dir) / checkpoint_name(state.global_step),
            )
        acc.wait_for_everyone()
        if args.should_save:
            done = publish(Path(args.output_dir), state.global_step, self.trainer.keep_checkpoints)
            record_save(Path(args.output_dir).parent.parent, state.global_step, self.mark, time.time())
            self.manifests.submit(done)
        acc.wait_for_everyone()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.manifests.close()


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
    "adapter_model.bin",
)


def write_weights(model: Any, ckpt: Path) -> None:
    """The model's weights (and config) into a checkpoint another host's rank 0 saved the rest of:
    transformers 5 writes weights from global rank 0 only, even with ``save_on_each_node``, and a host
    without a shared file system resumes from its own disk. Tied weights are written once (the first
    name), as ``save_pretrained`` writes them; nothing is written where a weights file already is."""
    from safetensors.torch import save_file

    if any((ckpt / name).exists() for name in WEIGHT_FILES):
        return
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        key = (tensor.device, *where, tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            tensors[name] = tensor.detach().contiguous().cpu()
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    if getattr(model, "config", None) is not None and not (ckpt / "config.json").exists():
        model.config.to_json_file(str(ckpt / "config.json"))


def record_save(run_dir: Path, step: int, start: float, end: float) -> None:
    """One line of saves.jsonl (append, one write): the supervisor sums an attempt's saves at its end."""
    line = json.dumps({"step": step, "start": start, "end": end}) + "\n"
    with open(run_dir / SAVES, "a", encoding="utf-8") as f:
        f.write(line)


def publish(staging: Path, step: int, keep: int) -> Path:
    """``staging/checkpoint-<step>`` renamed to ``staging/../checkpoint-<step>`` (returned; its manifest
    is the caller's: ``Manifests``); TRL's model card
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
    return target


class PippaGRPOTrainer(AtomicCheckpoints, RecordSamples, PrecisionHooks, EngineChoice, GRPOTrainer):  # type: ignore[misc]
    """Atomic checkpoints, a sample of some steps' batches in samples.jsonl (``samples``), the settled
    precision's optimizer and bf16 generation (``precision``, training_core.methods.precision_hooks;
    outermost, so every engine generates under it), and the generation engine of ``generation=`` (a
    Plan; training_core.generation) with its one-line fallback."""


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
