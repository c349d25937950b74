"""R1-Zero math rewards (DeepSeek-AI 2025; CS336 spring 2025 assignment 5): a strict answer format and
mathematical equivalence graded by math-verify, with the format and the answer reported separately.

The prompt (``training_core.data.prompts.R1_ZERO_PROMPT``) ends inside ``<think>``, so a well-formed
completion is ``reasoning </think> <answer> answer </answer>``: exactly one ``</think>``, then only
whitespace, then exactly one non-empty ``<answer>`` block; text after ``</answer>`` is ignored (a
generation may run on to its length limit). A second ``<answer>`` or ``</think>`` anywhere breaks the
format, so the answer graded is never one of several tries; so does an answer that is not one answer
(``answer_form.several_answers``: a disjunction, a ``cases`` block, several boxes, an equation with a
number on more than one side), which math-verify would pay when any branch or the right-hand side
matches. Graded by ``math_grader`` (worker processes, a time bound that holds on any thread).

- ``r1_zero_reward_fn(response, ground_truth)``: CS336's ``{"reward", "format_reward", "answer_reward"}``
  for ``training_core.rl.compute_group_normalized_rewards`` and custom loops.
- ``r1_zero``: the TRL reward, ``right`` when formatted and equivalent, else ``wrong`` (CS336's reward).
- ``r1_zero_format``: 1/0 well-formed, for logging at weight 0 (``reward/r1_zero_format``) or shaping.
"""

from __future__ import annotations

import re
from typing import Any

from training_core.rewards.answer_form import several_answers
from training_core.rewards.math_grader import MathGrader, default_grader
from training_core.rewards.registry import register
from training_core.rewards.text import completion_text

_FORMAT_RE = re.compile(r"</think>\s*<answer>(?P<answer>.*?)</answer>", re.DOTALL)


def r1_zero_answer(text: str) -> str | None:
    """The answer of a well-formed completion, stripped, or None when the format is broken or the block
    holds more than one answer."""
    if text.count("</think>") != 1 or text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return None
    m = _FORMAT_RE.search(text)
    if m is None or not m.group("answer").strip() or several_answers(m.group("answer")) is not None:
        return None
    return m.group("answer").strip()


def r1_zero_reward_fn(response: str, ground_truth: str, grader: MathGrader | None = None) -> dict[str, float]:
    """CS336's reward dict: format 1 when well-formed; answer and reward 1 when also equivalent."""
    answer = r1_zero_answer(response)
    if answer is None:
        return {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
    right = (grader or default_grader()).grade(str(ground_truth), answer) == "right"
    return {"format_reward": 1.0, "answer_reward": float(right), "reward": float(right)}


@register("r1_zero")
def r1_zero(
    completions: list[Any], answer: list[str], right: float = 1.0, wrong: float = 0.0, **_: Any
) -> list[float]:
    """``right`` when well-formed and mathematically equivalent to ``answer``, else ``wrong``."""
    answers = [r1_zero_answer(completion_text(c)) for c in completions]
    todo = [(str(a), p) for a, p in zip(answer, answers, strict=True) if p is not None]
    verdicts = iter(default_grader().grade_many(todo))
    return [right if p is not None and next(verdicts) == "right" else wrong for p in answers]


@register("r1_zero_format")
def r1_zero_format(completions: list[Any], **_: Any) -> list[float]:
    """1.0 for a well-formed ``</think> <answer>...</answer>`` completion, else 0.0."""
    return [float(r1_zero_answer(completion_text(c)) is not None) for c in completions]
