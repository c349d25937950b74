"""paramiko, imported with its optional ``invoke`` dependency loaded lazily and without
``importlib.metadata`` (``_QuickMetadata``: paramiko reads its own version through it, ~40 ms).

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
import os
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


class _QuickMetadata(types.ModuleType):
    """Stands in for ``importlib.metadata`` while paramiko imports, then is taken out again.

    paramiko 5 sets ``__version__ = metadata.version("paramiko")`` as it imports: importing
    importlib.metadata (email, zipfile, csv, pathlib) and searching sys.path for the distribution cost
    ~40 ms of every command that connects fresh. Here ``version("paramiko")`` reads the Version line
    of paramiko's own dist-info; any other name or attribute (another thread importing it in that
    window) gets the real module."""

    def version(self, name: str) -> str:
        if name == "paramiko":
            found = _paramiko_version()
            if found:
                return found
        return str(self._real().version(name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def _real(self) -> types.ModuleType:
        _take_out(self)
        return importlib.import_module("importlib.metadata")


def _take_out(stub: types.ModuleType) -> None:
    with _lock:
        if sys.modules.get("importlib.metadata") is stub:
            del sys.modules["importlib.metadata"]
        if importlib.__dict__.get("metadata") is stub:
            del importlib.__dict__["metadata"]


def _paramiko_version() -> str | None:
    """The Version of the installed paramiko distribution, from the dist-info next to its package."""
    try:
        spec = importlib.util.find_spec("paramiko")
        if spec is None or not spec.origin:
            return None
        site = os.path.dirname(os.path.dirname(spec.origin))
        for entry in os.listdir(site):
            if entry.startswith("paramiko-") and entry.endswith(".dist-info"):
                with open(os.path.join(site, entry, "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # the end of the headers
    except (OSError, ValueError, ImportError):
        pass
    return None


_defer_invoke()
_quick = None
if "importlib.metadata" not in sys.modules and "paramiko" not in sys.modules:
    _quick = _QuickMetadata("importlib.metadata")
    sys.modules["importlib.metadata"] = _quick
    importlib.__dict__["metadata"] = _quick
try:
    import paramiko  # after the stand-ins above, on purpose
finally:
    if _quick is not None:
        _take_out(_quick)

__all__ = ["paramiko"]
