"""Values a sandboxed program returned, decoded outside its reach.

The prelude encodes each test call's value as tagged JSON (numbers in hex, strings as UTF-8 hex) and
only for exact built-in types: an instance of a user class, or of a subclass of ``int`` or ``list``
with an ``__eq__`` that always says yes, arrives as ``Opaque`` and equals nothing. Decoding uses
``json.loads`` and a strict walker; malformed input from a program that forged the channel becomes
``Opaque`` too, so forging can only choose values, which the program could have returned anyway.
"""

from __future__ import annotations

import json
from typing import Any


class Opaque:
    """A value that could not be carried out of the sandbox (or an error); equal to nothing."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Opaque({self.what!r})"


def _float(s: Any) -> float:
    if not isinstance(s, str):
        raise ValueError(s)
    return float.fromhex(s)


def _value(node: Any) -> Any:
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise ValueError("malformed")
    tag, rest = node[0], node[1:]
    if tag in ("n", "T", "f") and not rest:
        return {"n": None, "T": True, "f": False}[tag]
    if tag == "e" and len(rest) == 1:
        return Opaque("raised " + bytes.fromhex(rest[0]).decode("utf-8", "replace"))
    if tag == "o" and not rest:
        return Opaque("not a built-in value")
    if len(rest) == 1 and isinstance(rest[0], str):
        s = rest[0]
        if tag == "i":
            return int(s, 16)
        if tag == "d":
            return _float(s)
        if tag == "s":
            return bytes.fromhex(s).decode("utf-8", "surrogatepass")
        if tag == "b":
            return bytes.fromhex(s)
    if tag == "c" and len(rest) == 2:
        return complex(_float(rest[0]), _float(rest[1]))
    if len(rest) == 1 and isinstance(rest[0], list):
        items = rest[0]
        if tag == "m":
            pairs = [(_value(p[0]), _value(p[1])) for p in items if isinstance(p, list) and len(p) == 2]
            if len(pairs) != len(items):
                raise ValueError("malformed dict")
            return dict(pairs)
        seq = [_value(x) for x in items]
        if tag == "l":
            return seq
        if tag == "t":
            return tuple(seq)
        if tag == "S":
            return set(seq)
        if tag == "F":
            return frozenset(seq)
    raise ValueError(f"unknown tag {tag!r}")


def decode(text: bytes, count: int) -> tuple[Any, ...] | None:
    """``count`` values from the status line's payload, None when it is missing or malformed."""
    try:
        data = json.loads(text)
        if not isinstance(data, list) or len(data) != count:
            return None
        out = []
        for item in data:
            try:
                out.append(_value(item))
            except (ValueError, TypeError, RecursionError, UnicodeDecodeError):
                out.append(Opaque("malformed"))
        return tuple(out)
    except (ValueError, RecursionError):
        return None
