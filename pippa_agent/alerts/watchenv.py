"""The environment the host's watcher runs with, and when ``watch-ensure`` replaces it for another.

What the watcher sees of its host comes from two places: the login environment of the command that
started it (its PATH finds nvidia-smi or not) and the host entry's ``env`` (pippa.toml / hosts.toml:
CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, a PATH of its own), which ``pippa up`` writes into config.json
as it writes the runs' cmd.sh. The watcher applies the entry's ``env`` over its own at start and records
both (watch.json); ``watch-ensure`` replaces a watcher whose record differs from what it would start now.
"""

from __future__ import annotations

import os
import re
import shutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # as the laptop validates it (transport.shell)


def entry_env(cfg: dict[str, Any]) -> dict[str, str]:
    """The host entry's ``env`` as ``pippa up`` wrote it in config.json (names a process can carry)."""
    env = cfg.get("env")
    if not isinstance(env, dict):
        return {}
    return {
        k: v
        for k, v in env.items()
        if isinstance(k, str) and _KEY.match(k) and isinstance(v, str) and "\0" not in v
    }


def environment(entry: dict[str, str]) -> dict[str, Any]:
    """What the watcher sees with ``entry`` applied: its PATH, the nvidia-smi found on it, the entry."""
    return {"path": os.environ.get("PATH", ""), "nvidia_smi": shutil.which("nvidia-smi"), "env": dict(entry)}


def take_entry_env(cfg: dict[str, Any]) -> dict[str, str]:
    """Apply the host entry's ``env`` to this process (the watcher, at start; its children inherit it)."""
    entry = entry_env(cfg)
    os.environ.update(entry)
    return entry


def differs(state: Any, cfg: dict[str, Any]) -> bool:
    """Whether the running watcher (its watch.json ``state``) sees another environment than one started
    now would: another PATH (the login environment's, or the entry's own) or another entry ``env`` (a
    variable added, changed or removed). A record without ``env`` (an earlier version's) had none."""
    if not isinstance(state, dict):
        return True
    entry = entry_env(cfg)
    path = entry.get("PATH", os.environ.get("PATH", ""))
    had = state.get("env")
    return state.get("path") != path or (had if isinstance(had, dict) else {}) != entry
