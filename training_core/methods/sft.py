"""The ``sft`` method: TRL's SFTTrainer on prompt-completion rows, the loss on the response only
(TRL's ``completion_only_loss``): its rows (``training_core.data.pairs``) and trainer
(``training_core.methods.supervised``). The rest is the supervised methods'
(``training_core.methods.trl_run.SupervisedMethod``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training_core.config import RunConfig
from training_core.data.loaders import Row
from training_core.methods.trl_run import SupervisedMethod


class SftMethod(SupervisedMethod):
    """SFT reads no rewards and samples nothing: only what its trainer uses is checked."""

    def banner(self, cfg: RunConfig) -> str:
        return "sft"

    def train_rows(self, rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
        from training_core.data.pairs import sft_rows

        return sft_rows(rows, cfg, tokenizer)

    def trainer(self) -> tuple[Any, Callable[[RunConfig, Path, list[str], str], Any]]:
        from training_core.methods.supervised import PippaSFTTrainer, sft_args

        return PippaSFTTrainer, sft_args
