"""The name -> reward table that recipes refer to: one ``training_core.plugin_registry.Registry`` like the
dataset, eval-task and callback tables, whose entries are either a plain reward or a factory.

Extension points (the code recipes of issue 5 use both):
- ``@register("name")`` on a plain reward ``fn(completions, **columns) -> list[float]``; a recipe's
  ``params`` are bound as keyword arguments.
- ``@register_factory("name")`` on ``factory(ctx: RewardContext, **params) -> reward fn`` for rewards
  that need the run's objects (the frozen policy of the code game, the tokenizer, the run dir). The
  trainer calls the factory once, after the model and tokenizer are loaded.
The table imports the modules in ``_REWARD_MODULES`` (missing ones are skipped) plus the recipe's
``plugins`` on first use. Keep reward modules free of top-level torch imports so ``--dry-run`` stays
light (import torch inside the function or factory).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from training_core.plugin_registry import Registry

RewardFn = Callable[..., list[float]]
RewardFactory = Callable[..., RewardFn]

# Modules that register rewards; add a module here when it defines new ones.
_REWARD_MODULES = (
    "training_core.rewards.math",
    "training_core.rewards.format",
    "training_core.rewards.code",
    "training_core.rewards.r1_zero",
)


@dataclass(frozen=True)
class Reward:
    """A table entry: ``fn`` for a plain reward, ``factory`` for one built from the run's context."""

    fn: RewardFn | None = None
    factory: RewardFactory | None = None


REWARDS: Registry[Reward] = Registry("reward", _REWARD_MODULES)


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
        REWARDS.add(name, Reward(fn=fn))
        return fn

    return deco


def register_factory(name: str) -> Callable[[RewardFactory], RewardFactory]:
    def deco(factory: RewardFactory) -> RewardFactory:
        REWARDS.add(name, Reward(factory=factory))
        return factory

    return deco


def load_all(plugins: Iterable[str] = ()) -> dict[str, Reward]:
    return REWARDS.load(plugins)


def names(plugins: Iterable[str] = ()) -> list[str]:
    return REWARDS.names(plugins)


def get(name: str, plugins: Iterable[str] = ()) -> RewardFn:
    """The plain reward function ``name`` (UnknownName for an unknown name, ValueError for a factory)."""
    entry = REWARDS.get(name, plugins)
    if entry.fn is None:
        raise ValueError(f"reward {name!r} needs the run's context: use build()")
    return entry.fn


def build(
    name: str,
    params: dict[str, Any] | None = None,
    context: RewardContext | None = None,
    plugins: Iterable[str] = (),
) -> RewardFn:
    """The registered reward with ``params`` bound; ``__name__`` is kept so TRL logs it by name."""
    entry = REWARDS.get(name, plugins)
    if entry.factory is not None:
        fn = entry.factory(context or RewardContext(), **(params or {}))
        fn.__name__ = name  # type: ignore[attr-defined]  # TRL logs rewards/<__name__>/mean
        return fn
    assert entry.fn is not None
    if not params:
        return entry.fn
    bound = functools.partial(entry.fn, **params)
    functools.update_wrapper(bound, entry.fn)
    return bound  # type: ignore[return-value]
