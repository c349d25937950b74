"""The name -> reward function table that recipes refer to.

Extension points (the code recipes of issue 5 use both):
- ``@register("name")`` on a plain reward ``fn(completions, **columns) -> list[float]``; a recipe's
  ``params`` are bound as keyword arguments.
- ``@register_factory("name")`` on ``factory(ctx: RewardContext, **params) -> reward fn`` for rewards
  that need the run's objects (the frozen policy of the code game, the tokenizer, the run dir). The
  trainer calls the factory once, after the model and tokenizer are loaded.
``load_all`` imports every module in ``_REWARD_MODULES`` (missing ones are skipped) plus the recipe's
``plugins``, so the table is complete before a recipe is resolved. Keep reward modules free of
top-level torch imports so ``--dry-run`` stays light (import torch inside the function or factory).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

RewardFn = Callable[..., list[float]]
RewardFactory = Callable[..., RewardFn]

REWARDS: dict[str, RewardFn] = {}
FACTORIES: dict[str, RewardFactory] = {}

# Modules that register rewards; add a module here when it defines new ones.
_REWARD_MODULES = (
    "training_core.rewards.math",
    "training_core.rewards.format",
    "training_core.rewards.code",
)


@dataclass
class RewardContext:
    """What a reward factory may use. ``model`` is the policy as loaded (before training changes it)."""

    model: Any = None
    tokenizer: Any = None
    run_dir: str = ""
    config: Any = None  # the resolved RunConfig
    extra: dict[str, Any] = field(default_factory=dict)


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    def deco(fn: RewardFn) -> RewardFn:
        if (name in REWARDS and REWARDS[name] is not fn) or name in FACTORIES:
            raise ValueError(f"reward {name!r} registered twice")
        REWARDS[name] = fn
        return fn

    return deco


def register_factory(name: str) -> Callable[[RewardFactory], RewardFactory]:
    def deco(factory: RewardFactory) -> RewardFactory:
        if (name in FACTORIES and FACTORIES[name] is not factory) or name in REWARDS:
            raise ValueError(f"reward {name!r} registered twice")
        FACTORIES[name] = factory
        return factory

    return deco


def load_all(plugins: Iterable[str] = ()) -> dict[str, RewardFn]:
    for mod in (*_REWARD_MODULES, *plugins):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # a real import error inside the module
                raise
    return REWARDS


def names() -> list[str]:
    load_all()
    return sorted({*REWARDS, *FACTORIES})


def get(name: str) -> RewardFn:
    load_all()
    try:
        return REWARDS[name]
    except KeyError:
        known = ", ".join(names())
        raise KeyError(f"unknown reward {name!r}; known rewards: {known}") from None


def build(name: str, params: dict[str, Any] | None = None, context: RewardContext | None = None) -> RewardFn:
    """The registered reward with ``params`` bound; ``__name__`` is kept so TRL logs it by name."""
    load_all()
    if name in FACTORIES:
        fn = FACTORIES[name](context or RewardContext(), **(params or {}))
        fn.__name__ = name  # type: ignore[attr-defined]  # TRL logs rewards/<__name__>/mean
        return fn
    fn = get(name)
    if not params:
        return fn
    bound = functools.partial(fn, **params)
    functools.update_wrapper(bound, fn)
    return bound  # type: ignore[return-value]
