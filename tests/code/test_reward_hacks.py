"""The cheapest ways to be paid without solving the task pay nothing (issue: Code RL v2).

Each program below scored full marks against the first sandbox; each must now score the failure value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from training_core.code.asserts import assert_job, judged
from training_core.code.mbpp_game import play
from training_core.rewards import code as rc
from training_core.rewards.code import assert_tests
from training_core.sandbox import Opaque, run_python

SQUARE = ["assert square(2) == 4", "assert square(-3) == 9"]
HONEST = "def square(x):\n    return x * x"
REPO = Path(__file__).resolve().parents[2]

HACKS = {
    "always_equal": "class Yes:\n    def __eq__(self, other):\n        return True\n"
    "def square(x):\n    return Yes()",
    "int_subclass": "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\ndef square(x):\n    return Yes(0)",
    "own_file": r"""
import re
ANS = {}
try:
    for a, b in re.findall(r"square\((-?\d+)\) == (-?\d+)", open(__file__).read()):
        ANS[int(a)] = int(b)
except OSError:
    pass
def square(x):
    return ANS.get(x, 0)
""",
    "code_object": r"""
import sys
C = [c for c in sys._getframe().f_code.co_consts if type(c) is int]
def square(x):
    return C[C.index(x) + 1] if x in C else 0
""",
    "patch_prelude": "import os\nos._exit = lambda c: None\nos.write = lambda fd, b: len(b)\n"
    "def square(x):\n    return 0\nraise SystemExit(0)",
    "status_byte": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'D')\n"
    "    except OSError:\n        pass\nos._exit(0)",
    "forged_values": "import os\nfor fd in range(3, 64):\n    try:\n"
    '        os.write(fd, b\'V[["T"],["T"]]\\nD\')\n'
    "    except OSError:\n        pass\nos._exit(0)",
    "exit_before_tests": "import sys\nsys.exit(0)",
}
READ_PROBLEMS = r"""
import re
EXP = {}
try:
    src = open(PATH).read()
    EXP = dict(re.findall(r'\("print\(add\((.*?)\)\)", "(.*?)"\)', src))
except OSError:
    pass
def add(a, b):
    return int(EXP.get(f"{a}, {b}", 0))
"""


def test_honest_solution_is_paid() -> None:
    assert assert_tests([HONEST], test_list=[SQUARE]) == [1.0]


@pytest.mark.parametrize("name", sorted(HACKS))
def test_assert_tests_pays_nothing_for_hack(name: str) -> None:
    assert assert_tests([HACKS[name]], test_list=[SQUARE]) == [0.0]


def test_shadowed_builtin_does_not_change_the_check() -> None:
    """``def set(...)`` in the program is not the ``set`` the assert calls (that one runs outside)."""
    tests = ["assert set(evens(5)) == set([0, 2, 4])"]
    honest = "def evens(n):\n    return [i for i in range(n) if i % 2 == 0]"
    hack = "def set(*a):\n    return 1\ndef evens(n):\n    return [7]"
    assert assert_tests([honest, hack], test_list=[tests, tests]) == [1.0, 0.0]


def test_asserts_are_split_so_expected_values_never_enter_the_sandbox() -> None:
    job = assert_job(
        HONEST, ["assert square(12345) == 152399025", "assert math.isclose(square(1.5), 2.25)"], "import math"
    )
    assert job.calls == ("square(12345)", "square(1.5)")
    assert "152399025" not in job.program + "".join(job.calls)
    r = run_python(job.program, calls=job.calls)
    assert r.values == (152399025, 2.25) and judged(job, r)


def test_values_that_are_not_plain_data_come_back_opaque() -> None:
    r = run_python("class A:\n    pass\nclass I(int):\n    pass\n", calls=("A()", "I(3)", "1/0", "[1, I(2)]"))
    assert r.values is not None and all(isinstance(v, Opaque) for v in r.values[:3])
    assert isinstance(r.values[3], Opaque)  # a container with a subclass inside is opaque as a whole


def test_test_cases_cannot_read_the_expected_outputs_from_the_repo() -> None:
    problems = REPO / "training_core" / "code" / "problems.py"
    assert problems.exists()
    hack = f"PATH = {str(problems)!r}\n{READ_PROBLEMS}"
    tests = [
        {"program": "print(add(2, 3))", "expected": "5"},
        {"program": "print(add(10, 32))", "expected": "42"},
    ]
    assert rc.test_cases([hack], tests=[tests]) == [0.0]


def test_code_game_random_output_is_invalid_not_a_win() -> None:
    programs = [
        "import os\nprint(int.from_bytes(os.urandom(6), 'big'))",
        "import random\nprint(random.getrandbits(40))",
        "print(hash('pippa'))",
        "import time\nprint(time.time_ns())",
        "print(id(object()))",
        "print(6 * 7)",
    ]
    got = play(programs, lambda prompts: ["<answer>1</answer>"] * len(prompts))
    assert got == [-1.0] * 5 + [1.0]
