"""The ``selfplay`` method: SPIRAL self-play (Liu et al. 2025, arXiv 2506.24119) on a game in pippa's own
loop (``training_core.selfplay.loop``): its validation here; the game pays the rewards, so there is no
dataset, reward or text eval task to name.
"""

from __future__ import annotations

from pathlib import Path

from training_core.config import Resolved, RunConfig
from training_core.errors import BadSetting
from training_core.methods.base import Method


class SelfPlayMethod(Method):
    """Self-play on pippa's own loop, not TRL's: it shares ``Method``'s face, not ``TrlMethod``'s run."""

    # pippa's own loop runs no autocast: "bf16" settles into bf16 weights with Kahan-compensated AdamW
    # here (training_core.hardware.precision.choose), never into fp32 master weights.
    autocast = False

    def validate(self, cfg: RunConfig) -> None:
        """Self-play takes its rewards from the game and trains in its own loop (training_core.selfplay)."""
        t, sp = cfg.train, cfg.selfplay
        if cfg.launch.processes > 1:
            raise BadSetting("selfplay trains in one process (its own loop): set launch.processes = 1")
        if cfg.rewards:
            raise BadSetting(
                "a selfplay recipe is paid by the game: remove its [[rewards]] (set rewards = [])"
            )
        for key in ("samples_per_step", "parallel_games", "max_turns", "micro_batch_size"):
            if getattr(sp, key) < 1:
                raise BadSetting(f"bad value for selfplay.{key}: must be >= 1, got {getattr(sp, key)}")
        if not 0.0 < sp.rae_decay < 1.0:
            raise BadSetting(f"bad value for selfplay.rae_decay: must be in (0, 1), got {sp.rae_decay}")
        if t.max_steps < 1:
            raise BadSetting("a selfplay recipe needs train.max_steps >= 1 (no dataset to count epochs over)")
        if t.temperature <= 0:
            raise BadSetting("bad value for train.temperature: must be > 0 (self-play samples its moves)")
        if t.num_iterations < 1 or t.max_completion_length < 1:
            raise BadSetting("train.num_iterations and train.max_completion_length must be >= 1")
        if t.beta != 0.0:
            raise BadSetting("selfplay has no KL term (SPIRAL trains with beta 0): set train.beta = 0")
        if cfg.model.lora_r > 0:
            raise BadSetting("selfplay trains the full model: set model.lora_r = 0")
        if cfg.model.precision in ("fp16", "bf16_amp"):
            raise BadSetting(
                f"selfplay trains in bf16 weights or fp32, not {cfg.model.precision}: "
                "--set model.precision=fp32 or bf16"
            )
        if t.lr_scheduler_type not in ("constant", "linear"):
            raise BadSetting(f"selfplay schedules the lr 'constant' or 'linear', got {t.lr_scheduler_type!r}")
        if t.optim != "adamw_torch":
            raise BadSetting(
                f"selfplay optimizes with torch AdamW (train.optim 'adamw_torch'), got {t.optim!r}"
            )
        if cfg.eval.task not in ("tictactoe", "none"):
            raise BadSetting(
                f"selfplay evaluates by playing games: eval.task must be 'tictactoe' or 'none', "
                f"got {cfg.eval.task!r}"
            )

    def check_names(self, cfg: RunConfig) -> None:
        """Nothing to look up: the game provides the data, the rewards and the evaluation (``validate``)."""

    def run(self, res: Resolved, run_dir: Path, resume: bool = False) -> int:
        from training_core.selfplay.loop import run as run_selfplay

        return run_selfplay(res, run_dir, resume)
