"""Where the project lives on this machine: the repo pippa syncs and whose pippa.toml it reads.

The git toplevel of the working directory when that is a git checkout (so `pippa` run inside any
clone syncs that clone), else the checkout this package was installed from.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from pippa_contract.rundir import RUNS

_PACKAGE_CHECKOUT = Path(__file__).resolve().parent.parent


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


def repo_root(cwd: Path | None = None) -> Path:
    """The project root: git toplevel of ``cwd``, else the package's own checkout."""
    return git_toplevel(cwd) or _PACKAGE_CHECKOUT


def team_inventory_path(repo: Path | None = None) -> Path:
    """The team's inventory: ``$PIPPA_INVENTORY``, else ``pippa.toml`` at the project root. Here, not in
    ``hosts``, because it also names the connection keeper's context (``transport.keeper_client``)."""
    override = os.environ.get("PIPPA_INVENTORY")
    return Path(override) if override else (repo or repo_root()) / "pippa.toml"


def pulled_runs_dir(runs_dir: Path | None = None) -> Path:
    """Where ``pippa pull`` puts runs (``<dir>/<host>/<run-id>``): ``runs_dir``, else ``<repo>/runs``."""
    return runs_dir if runs_dir is not None else repo_root() / RUNS
