"""The ``dpo`` method: TRL's DPOTrainer on chosen/rejected pairs (Rafailov et al. 2023) against the
starting model: its check of ``dpo.beta``, its rows (``training_core.data.pairs``) and trainer
(``training_core.methods.supervised``). The rest is the supervised methods'
(``training_core.methods.trl_run.SupervisedMethod``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training_core.config import RunConfig
from training_core.data.loaders import Row
from training_core.errors import BadSetting
from training_core.methods.trl_run import SupervisedMethod


class DpoMethod(SupervisedMethod):
    """DPO reads no rewards and samples nothing: only what its trainer uses is checked."""

    def validate_method(self, cfg: RunConfig) -> None:
        if cfg.dpo.beta <= 0:
            raise BadSetting(f"bad value for dpo.beta: must be > 0, got {cfg.dpo.beta}")

    def banner(self, cfg: RunConfig) -> str:
        return "dpo"

    def train_rows(self, rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
        from training_core.data.pairs import dpo_rows

        return dpo_rows(rows, cfg, tokenizer)

    def trainer(self) -> tuple[Any, Callable[[RunConfig, Path, list[str], str], Any]]:
        from training_core.methods.supervised import PippaDPOTrainer, dpo_args

        return PippaDPOTrainer, dpo_args
