"""Where the running host program lives: a leaf, so that any module (the supervisor, the alert
watcher, alert delivery) can start the program again without importing its entry point."""

from __future__ import annotations

import os
import sys


def program_file() -> str | None:
    """The zipapp this process runs from (None when it runs some other way: the bootstrap, a test)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.abspath(argv0) if argv0.endswith(".pyz") and os.path.isfile(argv0) else None
