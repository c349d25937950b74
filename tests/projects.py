"""A pippa project for a test: pippa acts on a checkout only when it is one (pippa_ops.repo)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_project(path: Path, git: bool = True) -> Path:
    """Mark ``path`` a pippa project with the empty ``recipes/`` and ``training_core/`` the marker
    asks for (empty directories: git lists no file, so a sync sends nothing more), then ``git init``."""
    (path / "recipes").mkdir(parents=True, exist_ok=True)
    (path / "training_core").mkdir(exist_ok=True)
    if git:
        subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path
