"""Recipes as the laptop sees them: ``recipes/*.toml`` stems and their one-line descriptions.

Read with tomllib only (no torch, no training_core import). An unknown name is refused here, before
anything is synced or started, with the known list; ``--set`` values are checked by asking the
trainer's own torch-free ``--check`` in a subprocess (the CLI is the contract between the halves).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pippa_ops.errors import BadSetting, UnknownRecipe, did_you_mean
from pippa_ops.repo import repo_root
from pippa_ops.transport.shell import validate_name

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
        raise UnknownRecipe(f"unknown recipe {name!r}{did_you_mean(name, known)}; known recipes: {listing}")
    return name


def check_settings(name: str, sets: Sequence[str], root: Path | None = None) -> None:
    """Refuse ``--set`` items the recipe does not accept before anything reaches a host.

    Runs ``python -m training_core.train NAME --check --set ...`` from this checkout (~0.1 s, no torch):
    its one-line ``error: ...`` and exit 2 become BadSetting. Any other outcome (a checkout without
    the trainer, an older trainer without --check) leaves the check to the run on the host.
    """
    if not sets:
        return
    argv = [sys.executable, "-m", "training_core.train", name, "--check"]
    for item in sets:
        argv += ["--set", item]
    try:
        p = subprocess.run(argv, cwd=root or repo_root(), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return
    last = (p.stderr.strip().splitlines() or [""])[-1]
    if p.returncode == 2 and last.startswith("error: "):
        raise BadSetting(f"recipe {name}: {last.removeprefix('error: ')}")
