"""TRL's SFTTrainer and DPOTrainer for the ``sft`` and ``dpo`` methods, configured from a RunConfig.

They share everything else with GRPO runs (training_core.runner): model loading, metrics.jsonl, W&B,
evals, SIGINT/SIGTERM saves and atomic checkpoints (``AtomicCheckpoints``). The sequence cap is
``data.max_prompt_length + train.max_completion_length`` tokens, the response's EOS included.
SFT takes the loss on the completion only (TRL's ``completion_only_loss`` on prompt-completion rows);
DPO (Rafailov et al. 2023) compares the policy with a frozen copy of the starting model (none with
LoRA: the adapter switched off is the reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

from training_core.config import RunConfig
from training_core.trainer import AtomicCheckpoints, training_args


class PippaSFTTrainer(AtomicCheckpoints, SFTTrainer):  # type: ignore[misc]
    pass


class PippaDPOTrainer(AtomicCheckpoints, DPOTrainer):  # type: ignore[misc]
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


def build_trainer(
    cfg: RunConfig,
    run_dir: Path,
    model: Any,
    tokenizer: Any,
    train_ds: Any,
    callbacks: list[Any],
    peft_config: Any,
) -> Any:
    import datasets

    datasets.disable_progress_bars()  # TRL's tokenizing maps would draw bars into the run's log
    if cfg.method == "sft":
        cls: Any = PippaSFTTrainer
        args: Any = sft_args(cfg, run_dir, ["none"], run_dir.name)
    elif cfg.method == "dpo":
        cls, args = PippaDPOTrainer, dpo_args(cfg, run_dir, ["none"], run_dir.name)
    else:
        raise ValueError(f"no supervised trainer for method {cfg.method!r}")
    return cls(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=peft_config,
    )
