"""Reward functions, registered by name so recipes can refer to them.

Every reward keeps TRL's signature ``fn(completions, **columns) -> list[float]``; parameters are
explicit keyword arguments bound by the recipe (see ``registry.build``).
"""

from training_core.rewards.registry import REWARDS, build, get, register

__all__ = ["REWARDS", "build", "get", "register"]
