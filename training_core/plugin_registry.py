"""A small name -> object table with lazily imported provider modules (datasets, eval tasks, callbacks).

Each table lists the modules that fill it; ``get`` imports them on first use (a missing module is
skipped, so ``training_core.code`` can ship later) plus any recipe ``plugins``. To add a dataset,
eval task or callback from another package, decorate it with the table's ``register`` and either add
your module to the table's module list or name it in the recipe's ``plugins = ["pkg.module"]``.
Rewards use the same class (``training_core.rewards.registry.REWARDS``), wrapped in functions that
bind a recipe's parameters.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from training_core.errors import UnknownName

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, modules: Iterable[str]) -> None:
        self.kind = kind
        self.modules = list(modules)
        self.table: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Enter ``obj`` under ``name``; the same object again is a no-op (a module imported twice)."""
        if name in self.table and self.table[name] is not obj and self.table[name] != obj:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self.table[name] = obj

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests that register a throwaway entry clean up with this)."""
        self.table.pop(name, None)

    def load(self, plugins: Iterable[str] = ()) -> dict[str, T]:
        for mod in (*self.modules, *plugins):
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as e:
                if e.name != mod:
                    raise
        return self.table

    def names(self, plugins: Iterable[str] = ()) -> list[str]:
        return sorted(self.load(plugins))

    def get(self, name: str, plugins: Iterable[str] = ()) -> T:
        table = self.load(plugins)
        if name not in table:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(table))}")
        return table[name]
