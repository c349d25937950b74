"""Run ids (docs/CONTRACTS.md): the one pattern a run id matches and the one way the trainer makes one.
The run directory's name is its id. Kept in this one module so the shared contract package can replace it."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def new_run_id(recipe: str) -> str:
    """``<local time>-<recipe stem>-<4 hex>``, e.g. ``20260101-120000-tiny-3f2a``."""
    stem = "".join(c if c.isalnum() or c in "_.-" else "-" for c in Path(recipe).stem)[:32] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"
