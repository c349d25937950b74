"""A loss or reward that becomes NaN or infinite ends the run ``diverged``, naming the step and the key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from training_core.run.divergence import Diverged, non_finite
from training_core.run.metrics import MetricsWriter, make_callback


def test_only_the_loss_and_the_reward_mean_are_watched() -> None:
    assert non_finite({"loss/total": 0.5, "reward/mean": 1.0}) is None
    assert non_finite({"loss/total": math.nan, "reward/mean": 1.0}) == "loss/total"
    assert non_finite({"loss/total": 0.1, "reward/mean": math.inf}) == "reward/mean"
    # a reward function that scored nothing has a NaN mean in TRL: not a divergence
    assert non_finite({"loss/total": 0.1, "reward/mean": 0.0, "reward/format": math.nan}) is None


def test_the_metrics_callback_writes_the_step_then_ends_the_run_naming_step_and_key(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(path)
    callback = make_callback(writer, progress=False, n_params=1)
    before = TrainerState(global_step=2, max_steps=10)
    callback.on_log(None, before, TrainerControl(), logs={"loss": 0.2, "reward": 0.5})
    with pytest.raises(Diverged, match=r"^diverged at step 3: loss/total is nan$"):
        state = TrainerState(global_step=3, max_steps=10)
        callback.on_log(None, state, TrainerControl(), logs={"loss": math.inf, "reward": 0.5})
    writer.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 3] and rows[1]["loss/total"] is None  # kept; JSON has no NaN
