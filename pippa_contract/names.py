"""Names that reach a host (runs, hosts, sessions) and the one run-id rule."""

from __future__ import annotations

import os
import re
import time

# Run ids, host and recipe names: a file name on the host that never needs quoting.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# tmux session names: like NAME_RE without "." (tmux reads "a.b" as window b of session a).
SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# Environment variable names (a host entry's env, the secrets file's keys).
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_MAX = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def is_session(value: object) -> bool:
    return isinstance(value, str) and SESSION_RE.fullmatch(value) is not None


def run_label(text: str) -> str:
    """A recipe name or path, or a command word, as the label of a run id (unsafe characters become
    ``-``; ``run`` when nothing is left)."""
    stem = text.rstrip("/").rsplit("/", 1)[-1]
    if stem.endswith(".toml"):
        stem = stem[: -len(".toml")]
    return _UNSAFE.sub("-", stem) or "run"


def new_run_id(label: str, now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<label>-<4 hex>`` in local time, the label cut so the id fits ``NAME_RE``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    suffix = os.urandom(2).hex()  # secrets.token_hex(2); importing secrets costs the agent ~5 ms
    label = run_label(label)[: NAME_MAX - len(stamp) - len(suffix) - 2]
    return f"{stamp}-{label}-{suffix}"
