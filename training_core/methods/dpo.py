"""The ``dpo`` method: TRL's DPOTrainer on chosen/rejected pairs (Rafailov et al. 2023) against the
starting model: its validation, rows (``training_core.data.pairs``) and trainer
(``training_core.methods.supervised``). The run itself is the TRL methods'
(``training_core.methods.trl_run``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training_core.config import Resolved, RunConfig
from training_core.data.loaders import Row
from training_core.errors import BadSetting
from training_core.methods import trl_run


def validate(cfg: RunConfig) -> None:
    """DPO reads no rewards and samples nothing: only what its trainer uses is checked."""
    trl_run.validate_trainer_settings(cfg)
    if cfg.dpo.beta <= 0:
        raise BadSetting(f"bad value for dpo.beta: must be > 0, got {cfg.dpo.beta}")
    trl_run.validate_callbacks(cfg)


def check_names(cfg: RunConfig) -> None:
    """The dataset and eval task the config names are registered; rewards are not read."""
    trl_run.check_names_without_rewards(cfg)


def banner(cfg: RunConfig) -> str:
    return "dpo"


def train_rows(rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
    from training_core.data.pairs import dpo_rows

    return dpo_rows(rows, cfg, tokenizer)


def reward_funcs(cfg: RunConfig, ctx: Any) -> list[Any]:
    return []  # the loss compares the chosen and rejected responses


def build_trainer(
    cfg: RunConfig,
    run_dir: Path,
    model: Any,
    tokenizer: Any,
    train_ds: Any,
    callbacks: list[Any],
    peft_config: Any,
    reward_funcs: Sequence[Any] = (),
) -> Any:
    from training_core.methods.supervised import PippaDPOTrainer, dpo_args

    return trl_run.supervised_trainer(
        PippaDPOTrainer, dpo_args, cfg, run_dir, model, tokenizer, train_ds, callbacks, peft_config
    )


def run(res: Resolved, run_dir: Path, resume: bool = False) -> int:
    return trl_run.run(sys.modules[__name__], res, run_dir, resume)  # type: ignore[arg-type]
