"""A recipe plugin for the alarm tests: a reward that pays 1.0 for everything, so every group's
rewards are equal and GRPO's advantage is zero (no learning signal)."""

from __future__ import annotations

from typing import Any

from training_core.rewards.registry import register


@register("constant_one")
def constant_one(completions: list[Any], **_: Any) -> list[float]:
    return [1.0] * len(completions)
