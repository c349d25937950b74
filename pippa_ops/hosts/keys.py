"""Keys of an inventory table this version does not know: a near miss of a known key is a typo (one
line, the suggestion, exit 2); any other is a setting of a newer pippa (a teammate's ``pippa.toml``),
so it gets one warning line naming it and the entry, and everything else works."""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from pippa_ops.errors import UsageError

NEAR = 0.75  # difflib's ratio for a typo: adress/address 0.93, gpu/gpus 0.86; newer settings stay below


def known_only(table: Mapping[str, Any], known: Iterable[str], where: str) -> dict[str, Any]:
    """``table`` without the keys a newer pippa may have written (warned once each); a near miss of a
    known key raises UsageError naming the key it means."""
    names = list(known)
    out = {}
    for key, value in table.items():
        if key in names or key.startswith("_"):
            out[key] = value
            continue
        close = difflib.get_close_matches(key, names, n=1, cutoff=NEAR)
        close = close or [n for n in names if len(key) >= 3 and n.startswith(key)][:1]  # gpus: gpus_per_node
        if close:
            known_list = ", ".join(names)
            raise UsageError(f"{where}: unknown key {key!r} (did you mean {close[0]!r}? known: {known_list})")
        _warn(f"pippa: warning: {where}: unknown key {key!r} ignored (a newer pippa's setting?)")
    return out


@functools.cache
def _warn(line: str) -> None:
    """Once per process: the inventory is read several times by one command."""
    print(line, file=sys.stderr)
