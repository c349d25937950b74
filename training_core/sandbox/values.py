"""Values a sandboxed program returned, decoded outside its reach, in bounded time and memory.

The prelude encodes each test call's value as tagged JSON (numbers in hex, strings as UTF-8 hex) and
only for exact built-in types: an instance of a user class, or of a subclass of ``int`` or ``list``
with an ``__eq__`` that always says yes, arrives as ``Opaque`` and equals nothing. Decoding uses
``json.loads`` and a strict walker; malformed input from a program that forged the channel becomes
``Opaque`` too, so forging can only choose values, which the program could have returned anyway.

The program shares the prelude's process, so it can write any line it likes on the status channel.
Both sides therefore apply the same ``Limits`` (the encoder turns a value beyond them into ``["o"]``;
the decoder checks them again before building anything): nesting depth, nodes per line, elements
per container, digits per integer and bytes per line. The decoder also refuses containers whose
items hash alike without being equal (a set of integers that all hash alike takes quadratic time to
build, in the decoder or in an assert's ``set()``). Beyond a limit a value is ``Opaque``, so a forged
line costs the trainer milliseconds, never seconds, and never a ``RecursionError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What one status line may carry; the prelude's encoder is built from the same numbers."""

    depth: int = 40  # containers inside containers; the judge's comparisons recurse this deep at most
    nodes: int = 50_000  # values in one line (all calls together): ~50 ms to decode at most
    elements: int = 20_000  # items in one list, tuple, set, frozenset or dict
    int_hex_digits: int = 8_192  # 32,768 bits (~9,900 decimal digits): arithmetic on it stays cheap
    bytes: int = 1 << 20  # one line; the status channel is read up to the output cap anyway
    collisions: int = 64  # items of one container that hash like an earlier, unequal item


LIMITS = Limits()


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


class _Beyond(Exception):
    """A limit was passed: the value becomes ``Opaque`` with this message."""


def _float(s: Any) -> float:
    if not isinstance(s, str):
        raise ValueError(s)
    return float.fromhex(s)


class _Walker:
    """Builds Python values from the parsed JSON, counting nodes across one line."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.nodes = 0

    def value(self, node: Any, depth: int) -> Any:
        lim = self.limits
        self.nodes += 1
        if self.nodes > lim.nodes:
            raise _Beyond(f"more than {lim.nodes} values")
        if depth > lim.depth:
            raise _Beyond(f"nested deeper than {lim.depth}")
        if not isinstance(node, list) or not node or not isinstance(node[0], str):
            raise ValueError("malformed")
        tag, rest = node[0], node[1:]
        if tag in ("n", "T", "f") and not rest:
            return {"n": None, "T": True, "f": False}[tag]
        if tag == "e" and len(rest) == 1 and isinstance(rest[0], str):
            return Opaque("raised " + bytes.fromhex(rest[0][:256]).decode("utf-8", "replace"))
        if tag == "o" and not rest:
            return Opaque("not a built-in value")
        if len(rest) == 1 and isinstance(rest[0], str):
            s = rest[0]
            if tag == "i":
                if len(s.lstrip("-")) > lim.int_hex_digits:
                    raise _Beyond(f"an integer of more than {lim.int_hex_digits} hex digits")
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
            if len(items) > lim.elements:
                raise _Beyond(f"a container of more than {lim.elements} items")
            if tag == "m":
                if not all(isinstance(p, list) and len(p) == 2 for p in items):
                    raise ValueError("malformed dict")
                pairs = [(self.value(p[0], depth + 1), self.value(p[1], depth + 1)) for p in items]
                self._check_hashes([k for k, _ in pairs], keys=True)
                return dict(pairs)
            seq = [self.value(x, depth + 1) for x in items]
            self._check_hashes(seq, keys=tag in ("S", "F"))
            if tag == "l":
                return seq
            if tag == "t":
                return tuple(seq)
            if tag in ("S", "F"):
                return set(seq) if tag == "S" else frozenset(seq)
        raise ValueError(f"unknown tag {tag!r}")

    def _check_hashes(self, items: list[Any], keys: bool) -> None:
        """Refuse items of which many hash alike without being equal: a set, a dict (``keys``) or the
        judge's own ``set(value)`` built from them would take quadratic time. Linear: each item is
        compared once, with the first item of its hash."""
        first: dict[int, Any] = {}
        collisions = 0
        for item in items:
            try:
                h = hash(item)
            except TypeError as e:  # a list inside: no set can hold it
                if keys:
                    raise ValueError("unhashable key") from e
                continue
            seen = first.setdefault(h, item)
            if seen is not item and seen != item:
                collisions += 1
        if collisions > self.limits.collisions:
            raise _Beyond(f"{collisions} hash collisions in one container")


def decode(text: bytes, count: int, limits: Limits = LIMITS) -> tuple[Any, ...] | None:
    """``count`` values from the status line's payload, None when it is missing or malformed.

    A value beyond ``limits`` (or malformed on its own) is ``Opaque``; the cost is linear in the
    line's bytes, which are capped."""
    if len(text) > limits.bytes:
        return tuple(Opaque(f"line of more than {limits.bytes} bytes") for _ in range(count))
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # json's own nesting guard raises RecursionError, quickly
        return None
    if not isinstance(data, list) or len(data) != count:
        return None
    walker = _Walker(limits)
    out: list[Any] = []
    for item in data:
        try:
            out.append(walker.value(item, 0))
        except _Beyond as e:
            out.append(Opaque(str(e)))
        except (ValueError, TypeError, OverflowError, UnicodeDecodeError):
            out.append(Opaque("malformed"))
    return tuple(out)
