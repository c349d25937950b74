"""Recipes as the laptop sees them: ``recipes/*.toml`` stems and their one-line descriptions.

Read with tomllib only (no torch, no training_core import): the trainer on the host validates the
rest. An unknown name is refused here, before anything is synced or started, with the known list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

from pippa_ops.errors import UnknownRecipe
from pippa_ops.repo import repo_root
from pippa_ops.shell import validate_name

# Files in recipes/ that are not runnable recipes (the documented base others override).
NOT_RECIPES = frozenset({"base"})


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    path: Path


def recipes_dir(root: Path | None = None) -> Path:
    return (root or repo_root()) / "recipes"


def list_recipes(root: Path | None = None) -> list[Recipe]:
    """Every runnable recipe, sorted by name; a file that does not parse shows that in its description."""
    out: list[Recipe] = []
    folder = recipes_dir(root)
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.toml")):
        name = path.stem
        if name in NOT_RECIPES or name.startswith("_"):
            continue
        try:
            data = tomllib.loads(path.read_text())
            description = str(data.get("description", ""))
        except (OSError, tomllib.TOMLDecodeError) as e:
            description = f"(unreadable: {e})"
        out.append(Recipe(name, description, path))
    return out


def check_recipe(name: str, root: Path | None = None) -> str:
    """Return ``name`` when it is a valid, known recipe; else InvalidName / UnknownRecipe."""
    validate_name("recipe", name)
    known = [r.name for r in list_recipes(root)]
    if name not in known:
        listing = ", ".join(known) if known else f"none (no {recipes_dir(root)})"
        raise UnknownRecipe(f"unknown recipe {name!r}; known recipes: {listing}")
    return name
