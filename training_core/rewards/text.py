"""Helpers shared by reward functions: completion text and number extraction.

TRL hands a reward either plain strings (plain prompts) or message lists (chat prompts); every
reward goes through ``completion_text`` so it works with both. Numbers are optionally signed
decimals with optional thousands separators ("1,234" == 1234); a sentence's trailing period is
not part of a number ("42." -> 42), a leading one is (".5" -> 0.5). A minus sign right after a digit
is the subtraction operator, not a sign ("10-3=7" -> 10, 3, 7).
"""

from __future__ import annotations

import re
from typing import Any

NUMBER_RE = re.compile(r"(?:(?<!\d)-)?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)")


def completion_text(completion: Any) -> str:
    """The assistant text of one completion: a string, or the last message of a chat completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            return str(last.get("content") or "")
    return ""


def numbers(text: str) -> list[float]:
    """Every number in ``text``, in order."""
    return [float(m.replace(",", "")) for m in NUMBER_RE.findall(text)]


def parse_number(text: str) -> float | None:
    """The first number in ``text`` ("$1,234." -> 1234.0), or None."""
    found = numbers(text)
    return found[0] if found else None


def same_number(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))
