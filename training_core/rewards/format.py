"""Format reward for ``<reasoning>…</reasoning><answer>…</answer>`` completions.

Used by the reasoning-format recipes; TRL signature, parameters explicit.
"""

from __future__ import annotations

import re
from typing import Any

from training_core.rewards.registry import register
from training_core.rewards.text import completion_text

STRICT_RE = re.compile(r"^\s*<reasoning>(.+?)</reasoning>\s*<answer>(.+?)</answer>\s*$", re.DOTALL)
LOOSE_RE = re.compile(r"<reasoning>.*?</reasoning>.*?<answer>.*?</answer>", re.DOTALL)


@register("reasoning_format")
def reasoning_format(
    completions: list[Any], strict: float = 1.0, loose: float = 0.5, **_: Any
) -> list[float]:
    """``strict`` when the whole completion is exactly the two non-empty blocks in order, ``loose`` when
    both blocks appear in order with other text around them, else 0."""
    out = []
    for c in completions:
        text = completion_text(c)
        m = STRICT_RE.match(text)
        if m and m.group(1).strip() and m.group(2).strip():
            out.append(strict)
        elif LOOSE_RE.search(text):
            out.append(loose)
        else:
            out.append(0.0)
    return out


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>`` block, stripped, or None (for graders and evals)."""
    found = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    return found[-1].strip() if found else None
