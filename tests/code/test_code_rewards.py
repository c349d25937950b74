"""Code reward values for each case, strings and TRL chat-message completions alike."""

from __future__ import annotations

import pytest

from training_core.code.extract import extract_code
from training_core.rewards import code as rc
from training_core.rewards import registry
from training_core.rewards.code import assert_tests, code_execution


def fence(code: str, tag: str = "python") -> str:
    return f"Here you go:\n```{tag}\n{code}\n```\nDone."


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_code_rewards_are_registered_by_name() -> None:
    for name in ("code_execution", "test_cases", "assert_tests"):
        assert registry.get(name).__name__ == name


def test_extract_code_prefers_answer_then_python_fence_then_raw_text() -> None:
    assert extract_code(fence("print(1)")) == "print(1)"
    assert extract_code("```bash\nls\n```\n```\nprint(2)\n```") == "print(2)"  # plain fence, other skipped
    assert extract_code("print(3)") == "print(3)"
    text = "<reasoning>use ```python\nx```</reasoning><answer>\n```python\nprint(4)\n```\n</answer>"
    assert extract_code(text, answer_tag=True) == "print(4)"
    assert extract_code("<answer>print(5)</answer>", answer_tag=True) == "print(5)"
    assert extract_code(chat(fence("print(6)"))) == "print(6)"
    assert extract_code("   \n") == ""


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (fence("print(1)"), 1.0),  # runs with output
        (fence("x = 1", tag=""), 0.5),  # plain fence, runs without output
        (fence("def f(:\n    pass"), -0.5),  # syntax error
        (fence("if True:\nprint(1)"), -0.5),  # indentation error
        (fence("1 / 0"), -1.0),  # runtime error
        (fence("import sys\nsys.stderr.write('warning')\nprint(1)"), -1.0),  # exit 0 but stderr
        ("", -1.0),  # no code
        ("print('raw text is code')", 1.0),  # no fence: the whole text
        (chat(fence("print(2)")), 1.0),  # conversational format
        (fence("import sys\nsys.exit(4)"), -1.0),
    ],
)
def test_code_execution_values(completion: object, expected: float) -> None:
    assert code_execution([completion]) == [expected]


def test_code_execution_timeout_is_minus_one() -> None:
    assert code_execution([fence("while True:\n    pass")], timeout_s=0.5) == [-1.0]


ADD_TESTS = [
    {"program": "print(add(2, 3))", "expected": "5"},
    {"program": "print(add(-1, 1))", "expected": "0"},
    {"program": "print(add(10, 32))", "expected": "42"},
]


def test_test_cases_fraction_plus_perfect_bonus() -> None:
    right = fence("def add(a, b):\n    return a + b")
    partial = fence("def add(a, b):\n    return abs(a) + b")  # wrong only for add(-1, 1)
    wrong = fence("def add(a, b):\n    return a - b")
    got = rc.test_cases([right, partial, wrong, "", chat(right)], tests=[ADD_TESTS] * 5)
    assert got == pytest.approx([2.0, 2 / 3, 0.0, 0.0, 2.0])


def test_test_cases_weights_first_n_and_answer_tag() -> None:
    right = "<reasoning>sum</reasoning><answer>def add(a, b):\n    return a + b</answer>"
    assert rc.test_cases(
        [right], tests=[ADD_TESTS], answer_tag=True, base_weight=0.5, perfect_bonus=2.0, perfect_weight=0.25
    ) == [1.0]
    wrong_last = fence("def add(a, b):\n    return 5 if a == 2 else 0")
    assert rc.test_cases([wrong_last], tests=[ADD_TESTS], n_tests=2) == [2.0]  # only the first two count


def test_test_cases_error_in_stderr_or_early_exit_fails_a_test() -> None:
    noisy = fence("import sys\ndef add(a, b):\n    sys.stderr.write('Error: meh')\n    return a + b")
    assert rc.test_cases([noisy], tests=[ADD_TESTS]) == [0.0]


MBPP_TESTS = ["assert square(2) == 4", "assert square(-3) == 9"]


def test_assert_tests_pass_fail_and_exit_tricks() -> None:
    good = fence("def square(x):\n    return x * x")
    bad = fence("def square(x):\n    return x + x")
    exit0 = fence("import sys\nsys.exit(0)")  # never reaches the asserts
    os_exit = fence("import os\nos._exit(0)")
    hidden = fence("def square(x):\n    return 0\nimport atexit, os\natexit.register(lambda: os._exit(0))")
    got = assert_tests([good, bad, exit0, os_exit, hidden, ""], test_list=[MBPP_TESTS] * 6)
    assert got == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_assert_tests_runs_setup_code_first() -> None:
    code = fence("def total(xs):\n    return sum(xs)")
    got = assert_tests([code], test_list=[["assert total(DATA) == 6"]], test_setup=["DATA = [1, 2, 3]"])
    assert got == [1.0]
