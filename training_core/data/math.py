"""MATH-style data for the R1-Zero recipes: problems with ``\\boxed{}`` solutions, and a synthetic set.

Rows are ``{"prompt", "answer"}`` like every dataset (``training_core.data.loaders``): the prompt is
the problem in a template (``"r1_zero"`` = ``training_core.data.prompts.R1_ZERO_PROMPT``, or any string with
``{question}``) and the answer is the last ``\\boxed{...}`` of the solution (Hendrycks et al. 2021's
convention), graded by ``training_core.rewards.r1_zero``. GSM8K in the same format is the ``gsm8k``
dataset with ``template = "r1_zero"``. Torch-free; ``datasets`` is imported inside the loaders.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from training_core.data.loaders import DATASETS, Row
from training_core.data.prompts import render

# Hub copy of MATH (Hendrycks et al. 2021) with columns problem/level/type/solution, train 7500, test 5000.
MATH_HUB_ID = "DigitalLearningGmbH/MATH-lighteval"


def last_boxed(solution: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces kept, or None."""
    start = max(solution.rfind("\\boxed"), solution.rfind("\\fbox"))
    if start < 0:
        return None
    rest = solution[start:]
    brace = rest.find("{")
    if brace < 0:
        return None
    if rest[len("\\boxed") if rest.startswith("\\boxed") else len("\\fbox") : brace].strip():
        return None  # "\boxed 5" or "\boxedx{": not a braced box
    depth = 0
    for i in range(brace, len(rest)):
        if rest[i] == "{":
            depth += 1
        elif rest[i] == "}":
            depth -= 1
            if depth == 0:
                return rest[brace + 1 : i].strip() or None
    return None


def math_rows(records: list[dict[str, Any]], template: str) -> list[Row]:
    """Problem/solution records as rows; a record without a boxed answer (or ``answer``) is skipped."""
    rows, skipped = [], 0
    for r in records:
        answer = str(r["answer"]).strip() if r.get("answer") else last_boxed(str(r.get("solution", "")))
        if not answer:
            skipped += 1
            continue
        rows.append({"prompt": render(str(r["problem"]), template), "answer": answer})
    if skipped:
        print(f"data: skipped {skipped} of {len(records)} problems without a boxed answer", file=sys.stderr)
    return rows


@DATASETS.register("math")
def math(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    data_files: str = "",
    hub_id: str = MATH_HUB_ID,
    template: str = "r1_zero",
    **_: Any,
) -> list[Row]:
    """MATH-style problems: local JSON/JSONL rows with ``problem`` and ``solution`` (or ``answer``) via
    ``data_files`` (tests, offline hosts), else ``hub_id``'s ``split``."""
    import datasets

    if data_files:
        ds = datasets.load_dataset("json", data_files=data_files, split="train")
    else:
        ds = datasets.load_dataset(hub_id, split=split)
    if n_rows > 0:
        ds = ds.select(range(min(n_rows, len(ds))))
    return math_rows(list(ds), template)


def synthetic_math_records(n: int, seed: int, max_operand: int = 9, ops: str = "+") -> list[dict[str, str]]:
    """``n`` MATH-format records (problem, worked solution ending in ``\\boxed{}``) made from ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, op = rng.randint(0, max_operand), rng.randint(0, max_operand), rng.choice(ops)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        out.append(
            {"problem": f"what is {a}{op}{b}?", "solution": f"{a}{op}{b}={value}, so \\boxed{{{value}}}"}
        )
    return out


@DATASETS.register("synthetic_math")
def synthetic_math(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    n: int = 64,
    template: str = "r1_zero",
    **params: Any,
) -> list[Row]:
    """Seeded arithmetic in MATH's problem/solution format (the R1-Zero smoke recipe's data): the same
    boxed-answer path as ``math`` without files or a hub; the "test" split draws with another seed."""
    records = synthetic_math_records(n, seed + (7919 if split != "train" else 0), **params)
    rows = math_rows(records, template)
    return rows[:n_rows] if n_rows > 0 else rows
