"""Small coding problems written for this repo, with stdout tests, for the ``code_tests`` recipe.

Each test is a program appended to the model's code; it passes when the combined program's stripped
stdout equals ``expected`` (the ``test_cases`` reward). Kept easy on purpose: a small model
must get some right so a group has reward spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CodeProblem:
    name: str
    signature: str
    task: str
    solution: str  # a reference solution; the tests check it passes every test
    tests: tuple[tuple[str, str], ...]  # (program, expected stdout)

    def test_dicts(self) -> list[dict[str, str]]:
        return [{"program": p, "expected": e} for p, e in self.tests]


def _p(name: str, signature: str, task: str, solution: str, *tests: tuple[str, str]) -> CodeProblem:
    return CodeProblem(name, signature, task, solution, tests)


PROBLEMS: tuple[CodeProblem, ...] = (
    _p(
        "add",
        "add(a, b)",
        "returns the sum of two numbers",
        "def add(a, b):\n    return a + b",
        ("print(add(2, 3))", "5"),
        ("print(add(-1, 1))", "0"),
        ("print(add(10, 32))", "42"),
    ),
    _p(
        "reverse_string",
        "reverse_string(s)",
        "returns the string reversed",
        "def reverse_string(s):\n    return s[::-1]",
        ("print(reverse_string('abc'))", "cba"),
        ("print(repr(reverse_string('')))", "''"),
        ("print(reverse_string('racecar'))", "racecar"),
    ),
    _p(
        "is_prime",
        "is_prime(n)",
        "returns True when n is a prime number, else False",
        "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))",
        ("print(is_prime(2))", "True"),
        ("print(is_prime(15))", "False"),
        ("print(is_prime(1))", "False"),
        ("print(is_prime(97))", "True"),
    ),
    _p(
        "factorial",
        "factorial(n)",
        "returns n! for a non-negative integer n",
        "def factorial(n):\n    r = 1\n    for i in range(2, n + 1):\n        r *= i\n    return r",
        ("print(factorial(0))", "1"),
        ("print(factorial(5))", "120"),
        ("print(factorial(10))", "3628800"),
    ),
    _p(
        "count_vowels",
        "count_vowels(s)",
        "returns how many vowels (a, e, i, o, u, any case) s contains",
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)",
        ("print(count_vowels('hello'))", "2"),
        ("print(count_vowels('xyz'))", "0"),
        ("print(count_vowels('AEIOU'))", "5"),
    ),
    _p(
        "fibonacci",
        "fibonacci(n)",
        "returns the n-th Fibonacci number with fibonacci(0) = 0, fibonacci(1) = 1",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        ("print(fibonacci(0))", "0"),
        ("print(fibonacci(1))", "1"),
        ("print(fibonacci(10))", "55"),
    ),
    _p(
        "is_palindrome",
        "is_palindrome(s)",
        "returns True when s reads the same backwards, else False",
        "def is_palindrome(s):\n    return s == s[::-1]",
        ("print(is_palindrome('level'))", "True"),
        ("print(is_palindrome('ab'))", "False"),
        ("print(is_palindrome(''))", "True"),
    ),
    _p(
        "sum_digits",
        "sum_digits(n)",
        "returns the sum of the decimal digits of a non-negative integer n",
        "def sum_digits(n):\n    return sum(int(d) for d in str(n))",
        ("print(sum_digits(123))", "6"),
        ("print(sum_digits(0))", "0"),
        ("print(sum_digits(9999))", "36"),
    ),
    _p(
        "gcd",
        "gcd(a, b)",
        "returns the greatest common divisor of two positive integers",
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
        ("print(gcd(12, 18))", "6"),
        ("print(gcd(7, 5))", "1"),
        ("print(gcd(100, 10))", "10"),
    ),
    _p(
        "max_of_list",
        "max_of_list(xs)",
        "returns the largest element of a non-empty list",
        "def max_of_list(xs):\n    return max(xs)",
        ("print(max_of_list([1, 5, 3]))", "5"),
        ("print(max_of_list([-4, -2]))", "-2"),
        ("print(max_of_list([7]))", "7"),
    ),
    _p(
        "fizzbuzz",
        "fizzbuzz(n)",
        "returns 'Fizz' for multiples of 3, 'Buzz' for multiples of 5, 'FizzBuzz' for both, else str(n)",
        "def fizzbuzz(n):\n    return 'Fizz' * (n % 3 == 0) + 'Buzz' * (n % 5 == 0) or str(n)",
        ("print(fizzbuzz(3))", "Fizz"),
        ("print(fizzbuzz(10))", "Buzz"),
        ("print(fizzbuzz(15))", "FizzBuzz"),
        ("print(fizzbuzz(7))", "7"),
    ),
    _p(
        "count_words",
        "count_words(s)",
        "returns the number of whitespace-separated words in s",
        "def count_words(s):\n    return len(s.split())",
        ("print(count_words('a b  c'))", "3"),
        ("print(count_words(''))", "0"),
        ("print(count_words('one'))", "1"),
    ),
)

REASONING_FORMAT = (
    "First think step by step inside <reasoning>...</reasoning>, then give only the code "
    "inside <answer>...</answer>."
)
PLAIN_FORMAT = "Put the code in one ```python code block."


def problem_prompt(problem: CodeProblem, reasoning: bool = False, style: str = "full") -> str:
    """The task as the model sees it; ``reasoning`` asks for the <reasoning>/<answer> format.
    ``style="signature"`` is just ``def name(args):`` (for the tiny model's 64-token context)."""
    if style == "signature":
        return f"def {problem.signature}:"
    ask = REASONING_FORMAT if reasoning else PLAIN_FORMAT
    return f"Write a Python function `{problem.signature}` that {problem.task}. {ask}"


def problem_rows(reasoning: bool = False, style: str = "full") -> list[dict[str, Any]]:
    """One training row per problem: the prompt and the ``tests`` column the test_cases reward reads."""
    return [
        {"prompt": problem_prompt(p, reasoning, style), "tests": p.test_dicts(), "name": p.name}
        for p in PROBLEMS
    ]
