"""Math rewards: the baseline and GSM8K correctness / length penalties and the
tiny recipe's dense closeness reward.

TRL signature: ``fn(completions, answer, **columns) -> list[float]``; ``answer`` is the dataset
column holding the expected answer as text. Parameters are explicit keyword arguments a recipe binds
(``[[rewards]] params = {...}``).
"""

from __future__ import annotations

import re
from typing import Any

from training_core.rewards.registry import register
from training_core.rewards.text import completion_text, numbers, parse_number, same_number

# One number, no leading zeros, no thousands separators: what a model that has learned the sum writes.
CANONICAL_NUMBER_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?")


@register("baseline_correctness")
def baseline_correctness(
    completions: list[Any], answer: list[str], right: float = 1.0, wrong: float = -1.0, **_: Any
) -> list[float]:
    """+1 when the expected number is among the completion's numbers or appears as a substring, else -1."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        text, expected = completion_text(c), str(a).strip()
        target = parse_number(expected)
        hit = target is not None and any(same_number(n, target) for n in numbers(text))
        out.append(right if hit or (expected != "" and expected in text) else wrong)
    return out


@register("baseline_length_penalty")
def baseline_length_penalty(
    completions: list[Any],
    free_chars: int = 20,
    scale_chars: float = 80.0,
    max_penalty: float = 0.5,
    **_: Any,
) -> list[float]:
    """0 up to ``free_chars`` characters, then -max_penalty*((len-free)/scale)^2, floored at -max_penalty."""
    out = []
    for c in completions:
        extra = max(0, len(completion_text(c)) - free_chars)
        out.append(max(-max_penalty, -max_penalty * (extra / scale_chars) ** 2))
    return out


@register("gsm8k_correctness")
def gsm8k_correctness(
    completions: list[Any],
    answer: list[str],
    final: float = 1.0,
    anywhere: float = 0.5,
    wrong: float = -1.0,
    **_: Any,
) -> list[float]:
    """1.0 when the completion's last number equals the answer, 0.5 when it only appears earlier, else -1."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        found, target = numbers(completion_text(c)), parse_number(str(a))
        if target is None or not found:
            out.append(wrong)
        elif same_number(found[-1], target):
            out.append(final)
        elif any(same_number(n, target) for n in found):
            out.append(anywhere)
        else:
            out.append(wrong)
    return out


@register("gsm8k_length_penalty")
def gsm8k_length_penalty(
    completions: list[Any],
    free_chars: int = 50,
    scale_chars: float = 150.0,
    max_penalty: float = 0.1,
    **_: Any,
) -> list[float]:
    """-max_penalty*(len-free)/scale past ``free_chars`` characters, floored at -max_penalty."""
    out = []
    for c in completions:
        extra = max(0, len(completion_text(c)) - free_chars)
        out.append(max(-max_penalty, -max_penalty * extra / scale_chars))
    return out


@register("arithmetic_closeness")
def arithmetic_closeness(
    completions: list[Any], answer: list[str], scale: float = 10.0, no_number: float = -1.0, **_: Any
) -> list[float]:
    """Dense correctness for the tiny model: 1 - |number - answer| / scale, floored at 0.

    A random-init model almost never emits the exact sum, so a +1/-1 reward gives a group no spread;
    this one rewards emitting a number at all and then getting closer, and it still peaks only at the
    right answer. Only a completion that is exactly one number in canonical form counts ("7", "-1",
    "2.5", surrounding whitespace allowed); anything else ("06", "7x", "7 8", "") scores ``no_number``.
    The earlier version parsed the first number anywhere, so "0" followed by any digit scored like that
    digit: the policy collapsed onto "0" as a free first character and greedy decoding answered "00".
    """
    out = []
    for c, a in zip(completions, answer, strict=True):
        text, target = completion_text(c).strip(), parse_number(str(a))
        if target is None or not CANONICAL_NUMBER_RE.fullmatch(text):
            out.append(no_number)
        else:
            out.append(max(0.0, 1.0 - abs(float(text) - target) / scale))
    return out
