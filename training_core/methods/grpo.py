"""The ``grpo`` method: TRL's GRPOTrainer with the recipe's rewards, Dr GRPO by default (Liu et al. 2025,
"Understanding R1-Zero-Like Training"): its validation, its rows (prompts only), its rewards and its
trainer (``training_core.methods.trainer``). The run itself is the TRL methods'
(``training_core.methods.trl_run.TrlMethod``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training_core.config import RunConfig
from training_core.data.loaders import Row
from training_core.errors import BadSetting, UsageError
from training_core.methods import trl_run
from training_core.methods.trl_run import TrlMethod


class GrpoMethod(TrlMethod):
    """GRPO (Dr GRPO by default, ``train.loss_type``): the trainer samples a group per prompt and the
    recipe's rewards score it."""

    generates = True  # the method writes its own batch; training_core.run.flops counts that forward

    def validate_method(self, cfg: RunConfig) -> None:
        """Cross-field checks that TRL would otherwise report deep inside its constructor."""
        t = cfg.train
        if t.num_generations < 2:
            raise BadSetting("bad value for train.num_generations: GRPO needs a group of at least 2")
        if t.generation_batch % t.num_generations:
            raise BadSetting(
                f"generation batch {t.generation_batch} is not a multiple of "
                f"train.num_generations={t.num_generations}; "
                "set train.generation_batch_size to a multiple of it"
            )
        if t.per_device_train_batch_size and t.generation_batch_size % t.per_device_train_batch_size:
            raise BadSetting(
                "train.generation_batch_size must be a multiple of train.per_device_train_batch_size"
            )
        if t.use_vllm is True and cfg.generation.engine not in ("auto", "vllm"):
            raise BadSetting(
                f"train.use_vllm = true conflicts with generation.engine = {cfg.generation.engine}; "
                "set one of them"
            )
        if t.dataloader_num_workers != 0:
            raise BadSetting(
                "train.dataloader_num_workers must be 0 (workers break TRL's generation batching)"
            )
        if t.temperature <= 0:
            raise BadSetting(
                "bad value for train.temperature: must be > 0 (sampling gives the group its spread)"
            )
        for r in cfg.rewards:
            if not r.name:
                raise BadSetting("a [[rewards]] entry has no name")
        if not cfg.rewards:
            raise BadSetting("the recipe has no rewards")

    def check_names(self, cfg: RunConfig) -> None:
        """The dataset, eval task and rewards the config names are registered (without importing torch)."""
        from training_core.rewards.registry import REWARDS

        trl_run.check_data_and_eval_names(cfg)
        for r in cfg.rewards:
            REWARDS.get(r.name, cfg.plugins)

    def banner(self, cfg: RunConfig) -> str:
        return f"loss {cfg.train.loss_type}"

    def train_rows(self, rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
        """The prompts in TRL's format; enough of them for one generation batch."""
        from training_core.data.loaders import build_dataset

        out = build_dataset(rows, cfg.data, tokenizer)
        need = cfg.train.generation_batch // cfg.train.num_generations
        if need > len(out):
            raise UsageError(
                f"a generation batch needs {need} prompts but the dataset has "
                f"{len(out)}; lower train.per_device_train_batch_size or add rows"
            )
        return out

    def reward_funcs(self, cfg: RunConfig, ctx: Any) -> list[Any]:
        from training_core.rewards import registry

        return [registry.build(r.name, r.params, ctx, cfg.plugins) for r in cfg.rewards]

    def build_trainer(
        self,
        cfg: RunConfig,
        run_dir: Path,
        model: Any,
        tokenizer: Any,
        train_ds: Any,
        callbacks: list[Any],
        peft_config: Any,
        reward_funcs: Sequence[Any] = (),
    ) -> Any:
        from training_core.generation.engines import for_host
        from training_core.methods.trainer import PippaGRPOTrainer, grpo_args

        plan = for_host(cfg)
        return PippaGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=list(reward_funcs),
            args=grpo_args(cfg, run_dir, ["none"], run_dir.name),
            train_dataset=train_ds,
            callbacks=callbacks,
            peft_config=peft_config,
            precision=cfg.model.precision,
            generation=plan,
        )
