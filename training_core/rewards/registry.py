"""The name -> reward function table that recipes refer to.

Modules that define rewards decorate them with ``@register("name")``; ``load_all`` imports every
such module so the table is complete before a recipe is resolved.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

RewardFn = Callable[..., list[float]]

REWARDS: dict[str, RewardFn] = {}

# Modules that register rewards; add a module here when it defines new ones.
_REWARD_MODULES = (
    "training_core.rewards.math",
    "training_core.rewards.format",
    "training_core.rewards.code",
)


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    def deco(fn: RewardFn) -> RewardFn:
        if name in REWARDS and REWARDS[name] is not fn:
            raise ValueError(f"reward {name!r} registered twice")
        REWARDS[name] = fn
        return fn

    return deco


def load_all() -> dict[str, RewardFn]:
    for mod in _REWARD_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # a real import error inside the module
                raise
    return REWARDS


def get(name: str) -> RewardFn:
    load_all()
    try:
        return REWARDS[name]
    except KeyError:
        known = ", ".join(sorted(REWARDS))
        raise KeyError(f"unknown reward {name!r}; known rewards: {known}") from None


def build(name: str, params: dict[str, Any] | None = None) -> RewardFn:
    """The registered reward with ``params`` bound; ``__name__`` is kept so TRL logs it by name."""
    fn = get(name)
    if not params:
        return fn
    bound = functools.partial(fn, **params)
    functools.update_wrapper(bound, fn)
    return bound  # type: ignore[return-value]
