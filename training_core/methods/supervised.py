"""TRL's SFTTrainer and DPOTrainer for the ``sft`` and ``dpo`` methods, configured from a RunConfig.

They share everything else with GRPO runs (training_core.methods.trl_run): model loading, metrics.jsonl, W&B,
evals, SIGINT/SIGTERM saves and atomic checkpoints (``AtomicCheckpoints``). The sequence cap is
``data.max_prompt_length + train.max_completion_length`` tokens, the response's EOS included.
SFT takes the loss on the completion only (TRL's ``completion_only_loss`` on prompt-completion rows);
DPO (Rafailov et al. 2023) compares the policy with a frozen copy of the starting model (none with
LoRA: the adapter switched off is the reference).
"""

from __future__ import annotations

from pathlib import Path

from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

from training_core.config import RunConfig
from training_core.methods.precision_hooks import PrecisionHooks
from training_core.methods.trainer import AtomicCheckpoints, training_args


class PippaSFTTrainer(AtomicCheckpoints, PrecisionHooks, SFTTrainer):  # type: ignore[misc]
    pass


class PippaDPOTrainer(AtomicCheckpoints, PrecisionHooks, DPOTrainer):  # type: ignore[misc]
    pass


def max_length(cfg: RunConfig) -> int:
    return cfg.data.max_prompt_length + cfg.train.max_completion_length


def sft_args(cfg: RunConfig, run_dir: Path, report_to: list[str], run_name: str) -> SFTConfig:
    return SFTConfig(
        **training_args(cfg, run_dir, report_to, run_name, SFTConfig),
        max_length=max_length(cfg),
        completion_only_loss=True,
        packing=False,
    )


def dpo_args(cfg: RunConfig, run_dir: Path, report_to: list[str], run_name: str) -> DPOConfig:
    return DPOConfig(
        **training_args(cfg, run_dir, report_to, run_name, DPOConfig),
        max_length=max_length(cfg),
        beta=cfg.dpo.beta,
        loss_type=[cfg.dpo.loss_type],
    )
