"""Where the project lives on this machine: the tree pippa syncs, whose recipes it runs, whose
pippa.toml it reads and where ``pippa pull`` writes.

A pippa project is a directory holding ``pippa.toml``, or both ``recipes/`` and ``training_core/``.
pippa uses the git toplevel of the working directory when that is a pippa project, else the checkout
pippa runs from (an editable install's tree) when that is one; another project's checkout is never
taken for it (a ``sync --delete`` from the wrong pane would replace the host's code tree).
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pippa_contract.rundir import RUNS
from pippa_ops.errors import UsageError

_PACKAGE_CHECKOUT = Path(__file__).resolve().parent.parent
MARKERS = "pippa.toml, or recipes/ and training_core/"


class NotAProject(UsageError):
    """Neither the working directory's checkout nor pippa's own is a pippa project."""


def git_toplevel(cwd: Path | None = None) -> Path | None:
    """The git toplevel of ``cwd`` (default: the working directory), or None outside a checkout.
    Asked of git once per directory and process: ``pippa run`` needs it 3-4 times (pippa.toml,
    recipes, sync), and each ``git rev-parse`` is a process start."""
    return _toplevel(os.path.abspath(cwd if cwd is not None else os.getcwd()))


@functools.cache
def _toplevel(cwd: str) -> Path | None:
    try:
        p = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0 or not p.stdout.strip():
        return None
    return Path(p.stdout.strip())


def is_project(path: Path) -> bool:
    """Whether ``path`` is a pippa project (see the module docstring)."""
    both = (path / "recipes").is_dir() and (path / "training_core").is_dir()
    return (path / "pippa.toml").is_file() or both


@dataclass(frozen=True)
class Project:
    """The project root and, when it is not the working directory's checkout, the checkout passed over."""

    root: Path
    passed_over: Path | None = None  # the working directory's git toplevel, not a pippa project

    def line(self, verb: str, path: Path | None = None) -> str:
        """One short line naming the tree a command sends or writes: ``sending /home/u/pippa``."""
        why = f" ({self.passed_over} is not a pippa project)" if self.passed_over is not None else ""
        return f"{verb} {path or self.root}{why}"


def find_project(cwd: Path | None = None) -> Project | None:
    """The project pippa uses from ``cwd``; None when neither candidate is one."""
    here = git_toplevel(cwd)
    if here is not None and is_project(here):
        return Project(here)
    if is_project(_PACKAGE_CHECKOUT):
        return Project(_PACKAGE_CHECKOUT, here)
    return None


def project(cwd: Path | None = None) -> Project:
    """The project pippa uses from ``cwd``; NotAProject (one line) when there is none."""
    found = find_project(cwd)
    if found is None:
        where = git_toplevel(cwd) or Path(os.path.abspath(cwd or os.getcwd()))
        raise NotAProject(
            f"{where} is not a pippa project (it needs {MARKERS}), and pippa was not "
            "installed from one: run pippa from your pippa checkout"
        )
    return found


def repo_root(cwd: Path | None = None) -> Path:
    """The project root (see the module docstring); NotAProject when there is none."""
    return project(cwd).root


def fallback_root(cwd: Path | None = None) -> Path:
    """The project root, or pippa's own tree where there is none: for what needs a directory even
    outside a project (the ``local`` host's, the inventory's), and sends or writes nothing there."""
    found = find_project(cwd)
    return found.root if found is not None else _PACKAGE_CHECKOUT


def team_inventory_path(repo: Path | None = None) -> Path:
    """The team's inventory: ``$PIPPA_INVENTORY``, else ``pippa.toml`` at the project root. Here, not in
    ``hosts``, because it also names the connection keeper's context (``transport.keeper.client``)."""
    override = os.environ.get("PIPPA_INVENTORY")
    return Path(override) if override else (repo or fallback_root()) / "pippa.toml"


def pulled_runs_dir(runs_dir: Path | None = None) -> Path:
    """Where ``pippa pull`` puts runs (``<dir>/<host>/<run-id>``): ``runs_dir``, else ``<repo>/runs``."""
    return runs_dir if runs_dir is not None else repo_root() / RUNS
