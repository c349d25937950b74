"""The self-play recipes resolve with SPIRAL's reference numbers, dispatch to the self-play loop, and
refuse settings the loop cannot honour with one line."""

from __future__ import annotations

import json

import pytest

from training_core.errors import BadSetting
from training_core.hardware.platform import PlatformFacts
from training_core.recipes import resolve
from training_core.train import main

H100 = PlatformFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80, bf16=True)
V100 = PlatformFacts(gpu_name="Tesla V100-SXM2-32GB", gpu_count=1, gpu_memory_gb=32, bf16=False)


def test_tictactoe_keeps_spirals_reference_numbers_on_an_h100() -> None:
    cfg = resolve("tictactoe", [], H100).config
    t, sp = cfg.train, cfg.selfplay
    assert cfg.method == "selfplay" and cfg.rewards == []
    assert (t.learning_rate, t.max_grad_norm, t.temperature, t.top_p, t.num_iterations, t.beta) == (
        1e-6,
        1.0,
        1.0,
        1.0,
        2,
        0.0,
    )
    assert (t.lr_scheduler_type, t.warmup_ratio) == ("constant", 0.0)
    assert (sp.rae_decay, sp.samples_per_step, sp.max_turns, sp.drop_zero_advantage) == (0.95, 128, 50, True)
    assert (sp.prompt, cfg.data.prompt_style, sp.eval_temperature, sp.eval_top_p) == (
        "spiral",
        "chat",
        0.6,
        0.95,
    )
    assert (cfg.eval.task, cfg.eval.interval, cfg.eval.n) == ("tictactoe", 16, 16)
    assert (cfg.model.precision, cfg.model.gradient_checkpointing) == ("bf16", True)


def test_dry_run_shows_the_selfplay_method(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tictactoe_tiny", "--dry-run"], facts=PlatformFacts()) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["method"] == "selfplay"
    assert out["config"]["selfplay"]["prompt"] == "board"


@pytest.mark.parametrize(
    ("sets", "facts", "words"),
    [
        (["rewards.baseline_correctness.weight=1"], PlatformFacts(), "paid by the game"),
        (["eval.task=arithmetic"], PlatformFacts(), "eval.task"),
        (["train.beta=0.1"], PlatformFacts(), "KL"),
        (["selfplay.rae_decay=1.0"], PlatformFacts(), "rae_decay"),
        (["train.lr_scheduler_type=cosine"], PlatformFacts(), "constant"),
        ([], V100, "model.precision"),  # the V100 preset's fp16: no loss scaling in this loop
    ],
)
def test_settings_the_loop_cannot_honour_are_refused(
    sets: list[str], facts: PlatformFacts, words: str
) -> None:
    with pytest.raises(BadSetting, match=words):
        resolve("tictactoe", sets, facts)
