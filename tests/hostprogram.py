"""The host program (``~/.cache/pippa/agent-<sha>.pyz``) as the bootstrap stores it, for tests that
run the supervisor or the alerts without an agent call first."""

from __future__ import annotations

import os
from pathlib import Path

from pippa_agent.cache import store_program
from pippa_ops.transport import agent_bundle

ROOT = Path(__file__).resolve().parents[1]


def install(home: Path) -> Path:
    """Store this checkout's host program under ``home`` (cache directory 0700) and return its path."""
    cache = home / ".cache" / "pippa"
    cache.mkdir(parents=True, exist_ok=True)
    cache.chmod(0o700)
    path = cache / f"agent-{agent_bundle.digest()}.pyz"
    store_program(str(path), agent_bundle.payload())
    return path


def source_env(home: Path) -> dict[str, str]:
    """An environment where ``python3 -S`` imports this checkout's packages (``-S`` drops the venv)."""
    return {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
