"""Code prompt datasets, registered in training_core.data's table (imported via ``training_core.code``).

- ``code_fixed_prompt``: one prompt repeated (the code_execution recipe's setup: the signal is
  whether the code runs, so the prompt need not vary).
- ``code_tests``: this repo's problems (``problems.PROBLEMS``) with a ``tests`` column.
- ``mbpp``: MBPP problems with ``test_list`` / ``test_setup`` columns for ``assert_tests``.
- ``code_game``: the game's fixed instruction repeated.
"""

from __future__ import annotations

from typing import Any

from training_core.code.mbpp import load_mbpp, mbpp_prompt
from training_core.code.mbpp_game import GAME_PROMPT
from training_core.code.problems import problem_rows
from training_core.data.loaders import DATASETS, Row

FIXED_CODE_PROMPT = (
    "Write a short Python program that computes something and prints the result. "
    "Put the program in one ```python code block."
)


def _repeat(rows: list[Row], n_rows: int, repeat: int) -> list[Row]:
    out = [dict(r) for _ in range(max(repeat, 1)) for r in rows]
    return out[:n_rows] if n_rows > 0 else out


@DATASETS.register("code_fixed_prompt")
def code_fixed_prompt(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    prompt: str = FIXED_CODE_PROMPT,
    repeat: int = 64,
    **_: Any,
) -> list[Row]:
    """``prompt`` repeated ``repeat`` times."""
    return _repeat([{"prompt": prompt}], n_rows, repeat)


@DATASETS.register("code_tests")
def code_tests(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    reasoning: bool = False,
    repeat: int = 1,
    style: str = "full",
    **_: Any,
) -> list[Row]:
    """The repo's problems (``reasoning`` asks for <reasoning>/<answer>), repeated ``repeat`` times."""
    return _repeat(problem_rows(reasoning, style), n_rows, repeat)


@DATASETS.register("mbpp")
def mbpp(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    config: str = "sanitized",
    data_files: str = "",
    **_: Any,
) -> list[Row]:
    """MBPP rows: the standard prompt with the visible tests, and the columns ``assert_tests`` reads:
    every test, the held-out ones included (``mbpp.MbppProblem.held_out``)."""
    problems = load_mbpp(config, split, n_rows, data_files or None)
    return [
        {
            "prompt": mbpp_prompt(p),
            "test_list": list(p.all_tests),
            "test_setup": p.setup,
            "task_id": p.task_id,
        }
        for p in problems
    ]


@DATASETS.register("code_game")
def code_game(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    prompt: str = GAME_PROMPT,
    repeat: int = 64,
    **_: Any,
) -> list[Row]:
    """The game's instruction repeated ``repeat`` times."""
    return _repeat([{"prompt": prompt}], n_rows, repeat)
