"""What counts as a pass for each code check; shared by the rewards, MBPP scoring and the game.

Kept apart from the reward module so MBPP evaluation and the rewards agree by construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from training_core.sandbox import SandboxResult, Status


def execution_score(result: SandboxResult | None, with_output: float = 1.0, without_output: float = 0.5,
                    syntax: float = -0.5, failure: float = -1.0) -> float:
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
    return (result.status is Status.OK and result.completed and "error" not in result.stderr.lower()
            and result.stdout.strip() == str(expected).strip())


def assert_program(code: str, test_list: Sequence[str], setup: str = "") -> str:
    """MBPP's check: setup code, the solution, then every assert."""
    asserts = "\n".join(str(t) for t in test_list)
    return f"{setup}\n{code}\n\n{asserts}\n" if setup.strip() else f"{code}\n\n{asserts}\n"


def asserts_passed(result: SandboxResult) -> bool:
    return result.status is Status.OK and result.completed
