"""What counts as a pass for each code check; shared by the rewards, MBPP scoring and the game.

Kept apart from the reward module so MBPP evaluation and the rewards agree by construction.
"""

from __future__ import annotations

from training_core.sandbox import SandboxResult, Status


def execution_score(
    result: SandboxResult | None,
    with_output: float = 1.0,
    without_output: float = 0.5,
    syntax: float = -0.5,
    failure: float = -1.0,
) -> float:
    """The code_execution value of one run (``None`` = no code)."""
    if result is None:
        return failure
    if result.status is Status.SYNTAX_ERROR:
        return syntax
    if result.status is Status.OK and not result.stderr.strip():
        return with_output if result.stdout.strip() else without_output
    return failure


def stdout_test_passed(result: SandboxResult, expected: str) -> bool:
    """A stdout test passes on exit 0, a finished program, no "error" in stderr, equal stripped stdout."""
    return (
        result.status is Status.OK
        and result.completed
        and "error" not in result.stderr.lower()
        and result.stdout.strip() == str(expected).strip()
    )
