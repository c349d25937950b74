"""paramiko, imported with its optional ``invoke`` dependency loaded lazily.

Why: ``paramiko.config`` imports invoke at import time only so that a ``Match exec`` line in
~/.ssh/config can run its command; that import (invoke's vendored yaml, unittest.mock, ...) is ~55 ms
of every pippa command that touches a host, about as much as the rest of paramiko. Here invoke is
registered as a stand-in module before paramiko loads: the name resolves as before (an ``import
invoke`` elsewhere, concurrent or later, gets the real module on first use), and invoke's code runs on
first attribute use, i.e. only when a ``Match exec`` line is evaluated. Every module here imports
paramiko through this one (``from pippa_ops.transport._paramiko import paramiko``), so this runs first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.Lock()


class _DeferredInvoke(types.ModuleType):
    """Stands in for ``invoke`` until one of its attributes is used, then imports and forwards to it.

    A plain stand-in rather than ``importlib.util.LazyLoader``: on Python 3.11 a later ``import
    invoke`` (paramiko's own) reads ``__spec__`` of a lazy module and so loads it at once.
    """

    def __getattr__(self, name: str) -> Any:
        with _lock:
            if sys.modules.get("invoke") is self:
                del sys.modules["invoke"]
        return getattr(importlib.import_module("invoke"), name)


def _defer_invoke() -> None:
    with _lock:
        if "invoke" in sys.modules:
            return
        try:
            spec = importlib.util.find_spec("invoke")
        except (ImportError, ValueError):
            return
        if spec is None:
            return  # not installed: paramiko handles that itself
        stub = _DeferredInvoke("invoke")
        stub.__spec__ = spec
        sys.modules["invoke"] = stub


_defer_invoke()

import paramiko  # noqa: E402  (after the deferral above, on purpose)

__all__ = ["paramiko"]
