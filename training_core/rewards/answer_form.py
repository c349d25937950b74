"""What counts as one answer for a math grader: the rules that pay for the answer, not for a convention.

math-verify reads an equation by its right-hand side (``5 = 4`` is 4, ``1=2=…=17`` is 17), accepts a
disjunction or a ``cases`` block when any branch matches (``x=3 \\lor x=4`` pays for 4), and counts a
percent at both scales (``400\\%`` pays for 4). Each lets a model hedge or state something false and
still be paid, so a prediction of one of these shapes is not an answer (``several_answers`` says which)
and a percent is read as the number written before it, at the scale the ground truth states
(``strip_percent``: ``20\\%`` is 20, never 0.2).
"""

from __future__ import annotations

import re

# an "or" of any spelling: \lor, \vee, ∨, the word (also inside \text{ or }, \mathrm{or})
_DISJUNCTION = re.compile(r"\\(?:lor|vee)(?![A-Za-z])|∨|(?<![A-Za-z])or(?![A-Za-z])", re.IGNORECASE)
_CASES = re.compile(r"\\begin\s*\{\s*(?:cases|dcases|rcases)\s*\}")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# a matrix or array may break lines (its rows); a line break anywhere else starts another answer
_MATRIX = re.compile(
    r"\\begin\s*\{\s*([pbvVB]?matrix|array|smallmatrix)\s*\}.*?\\end\s*\{\s*\1\s*\}", re.DOTALL
)
_LINE_BREAK = re.compile(r"\\\\")
# one "=" of an equation: not part of <=, >=, != or \ne (which are no equations)
_EQUALS = re.compile(r"(?<![<>!=])=+(?![=>])")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\s*\{\s*\\?%\s*\}|\\text\s*\{\s*percent\s*\}|\bpercent\b)")


def _is_number(side: str) -> bool:
    """A side with a digit and no variable: a constant (``\\frac{1}{2}``, ``2\\sqrt{3}``)."""
    bare = _COMMAND.sub(" ", _TEXT.sub(" ", side))
    return any(c.isdigit() for c in bare) and not any(c.isalpha() for c in bare)


def several_answers(answer: str) -> str | None:
    """Why ``answer`` is not one answer (a disjunction, a ``cases`` block, several boxes, several lines
    outside a matrix, more than one ``=``, an equation with a number on each side), or None when it is
    one. ``x = 3`` and ``y = 2x + 1`` are one answer."""
    if _DISJUNCTION.search(answer):
        return "a disjunction"
    if _CASES.search(answer):
        return "a cases block"
    if len(_BOXED.findall(answer)) > 1:
        return "several boxed answers"
    if _LINE_BREAK.search(_MATRIX.sub(" ", answer)):
        return "several lines"
    sides = _EQUALS.split(answer)
    if len(sides) > 2:
        return "a chain or several equations"
    if len(sides) == 2 and all(_is_number(s) for s in sides):
        return "an equation with a number on each side"
    return None


def strip_percent(answer: str) -> str:
    """``answer`` without its percent signs, so ``20\\%`` and ``20`` are the same number and ``400\\%`` is
    400: a percent is compared at the scale the ground truth states, never also divided by 100."""
    return _PERCENT.sub("", answer).strip()
