"""The asserts judge cannot be crashed or starved by values a program forges (issue: Code RL v3).

A program shares the prelude's process, so it can write its own values line on the status channel.
Each forged line below once crashed the judge (lists nested hundreds deep: ``RecursionError`` for the
whole batch) or starved it (integers that all hash alike: seconds of trainer CPU per completion).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time

from training_core.code.asserts import Verdict, assert_job, judge
from training_core.rewards.code import assert_verdicts
from training_core.sandbox import Opaque, SandboxResult, Status, detect
from training_core.sandbox.values import LIMITS, decode

SQUARE = ["assert square(2) == 4", "assert square(-3) == 9"]
HONEST = "def square(x):\n    return x * x"
MERSENNE = (1 << 61) - 1  # CPython hashes an int modulo this prime: k * MERSENNE + 4 all hash to 4


def _forger(payload: str) -> str:
    """A program that writes ``V<payload>`` followed by "ran to the end" on every descriptor it has."""
    return (
        "import os\n" + payload + "\nline = b'V' + value.encode() + b'\\nD'\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, line)\n"
        "    except OSError:\n        pass\nos._exit(0)\n"
    )


DEEP = _forger("value = '[' + '[\"l\",[' * 400 + '[\"i\",\"4\"]' + ']]' * 400 + ',[\"i\",\"9\"]]'")
COLLIDING = _forger(
    f"M = {MERSENNE}\n"
    "items = ','.join('[\"i\",\"%x\"]' % (k * M + 4) for k in range(15000))\n"
    'value = \'[["S",[\' + items + \']],["i","9"]]\''
)
MANY_NODES = _forger(
    'inner = \'["l",[["n"],["n"],["n"]]]\'\n'
    "value = '[[\"l\",[' + ','.join([inner] * 15000) + ']],[\"i\",\"9\"]]'"
)


def _trainer_cpu(call: str, **values: object) -> tuple[object, float]:
    """``call`` evaluated in a fresh interpreter: its result and the CPU seconds that process spent on it.

    A fresh process, because the pool's threads score in this process and any thread an earlier test
    left behind in a pytest worker would count too (it once did: 0.29 s charged to a 0.02 s decode)."""
    script = (
        "import json, resource, sys\n"
        "from training_core.rewards.code import assert_tests, assert_verdicts\n"
        "from training_core.sandbox import detect\n"
        "detect()\n"
        "def cpu():\n"
        "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
        "    return r.ru_utime + r.ru_stime\n"
        "v = json.load(sys.stdin)\n"
        "before = cpu()\n"
        f"got = {call}\n"
        "spent = cpu() - before\n"
        "print(json.dumps([got, spent]))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got, spent = json.loads(p.stdout)
    return got, spent


def test_three_forgers_score_zero_and_the_correct_completion_one_in_under_a_second_of_cpu() -> None:
    rewards, spent = _trainer_cpu(
        "assert_tests(v['completions'], test_list=[v['tests']] * 4)",
        completions=[DEEP, COLLIDING, MANY_NODES, HONEST],
        tests=SQUARE,
    )
    assert rewards == [0.0, 0.0, 0.0, 1.0]
    # unguarded, COLLIDING alone cost the trainer seconds and DEEP crashed the batch
    assert spent < 1.0, f"the trainer spent {spent:.2f} s of CPU on the batch"


def test_each_forger_fails_with_a_reason_naming_the_limit() -> None:
    verdicts = assert_verdicts([DEEP, COLLIDING, MANY_NODES, HONEST], test_list=[SQUARE] * 4)
    reasons = [v.reason for v in verdicts]
    assert f"nested deeper than {LIMITS.depth}" in reasons[0]
    assert "hash collisions" in reasons[1]
    assert f"more than {LIMITS.nodes} values" in reasons[2]
    assert verdicts[3] == Verdict(True)


def _decode_cpu(line: str) -> tuple[tuple[object, ...] | None, float]:
    """The decoder's result and the least CPU this thread spent on it over three tries.

    The garbage collector is off meanwhile: in a pytest worker that has loaded torch, one full
    collection walks millions of objects and would be charged to whichever line triggered it."""
    best, got = float("inf"), None
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            start = time.thread_time()
            got = decode(line.encode(), 1)
            best = min(best, time.thread_time() - start)
    finally:
        gc.enable()
    return got, best


def test_decode_refuses_each_limit_in_linear_time() -> None:
    """Each refusal costs about what decoding a benign line of the same size costs, not the seconds a
    quadratic set build of 19,000 colliding integers takes (2.3 s here). Measured against that baseline
    on this thread, so a slow or busy machine scales both sides."""
    plain = '[["S",[' + ",".join('["i","%x"]' % (k * 7919 + 4) for k in range(19000)) + "]]]"
    assert len(decode(plain.encode(), 1)[0]) == 19000  # type: ignore[index]
    _, baseline = _decode_cpu(plain)
    deep = "[" + '["l",[' * 5000 + '["n"]' + "]]" * 5000 + "]"
    colliding = '[["S",[' + ",".join('["i","%x"]' % (k * MERSENNE + 4) for k in range(19000)) + "]]]"
    wide = '[["l",[' + ",".join(['["n"]'] * (LIMITS.elements + 1)) + "]]]"
    big_int = '[["i","' + "f" * (LIMITS.int_hex_digits + 1) + '"]]'
    too_long = '[["s","' + "41" * LIMITS.bytes + '"]]'
    colliding_list = '[["l",[' + ",".join('["i","%x"]' % (k * MERSENNE + 4) for k in range(19000)) + "]]]"
    for line in (deep, colliding, wide, big_int, too_long, colliding_list):
        got, spent = _decode_cpu(line)
        assert got is None or isinstance(got[0], Opaque), line[:60]
        assert spent < 5 * baseline + 0.05, f"{spent:.3f} s (benign line: {baseline:.3f} s) for {line[:60]}"


def test_values_within_the_limits_still_come_back() -> None:
    line = json.dumps(
        [
            ["S", [["i", f"{k:x}"] for k in range(1000)]],
            ["l", [["l", [["s", "6869"]]]]],
            ["m", [[["t", [["i", "1"], ["i", "-2"]]], ["d", (0.5).hex()]]]],
        ]
    )
    assert decode(line.encode(), 3) == (set(range(1000)), [["hi"]], {(1, -2): 0.5})
    same = json.dumps([["l", [["i", "0"]] * 5000 + [["l", []]] * 10]])  # equal items are no collisions
    assert decode(same.encode(), 1) == ([0] * 5000 + [[]] * 10,)
    dup_keys = '[["m",[' + ",".join(['[["i","1"],["n"]]'] * 1000) + "]]]"  # forged, but harmless
    assert decode(dup_keys.encode(), 1) == ({1: None},)


def test_a_value_too_deep_for_the_encoder_arrives_opaque_not_as_a_crash() -> None:
    code = "def square(x):\n    v = x * x\n    for _ in range(200):\n        v = [v]\n    return v"
    verdict = assert_verdicts([code], test_list=[["assert square(2) == 4"]])[0]
    assert not verdict.passed and "no plain value" in verdict.reason


def test_a_check_that_raises_fails_that_completion_alone() -> None:
    job = assert_job(HONEST, ["assert square(2) / 0 == 1"])
    result = SandboxResult(Status.OK, 0, "", "", 0.1, 0.1, True, detect().isolation, values=(4,))
    verdict = judge(job, result)
    assert verdict == Verdict(False, "assert 0 raised ZeroDivisionError")


def test_a_returned_list_that_hashes_alike_cannot_stall_an_asserts_set() -> None:
    """Not forged at all: the solution returns integers that all hash alike, and the assert calls
    ``set()`` on them in the trainer. The decoder refuses the list before the judge sees it."""
    code = f"def square(x):\n    return [k * {MERSENNE} + 4 for k in range(15000)]"
    call = "[[x.passed, x.reason] for x in assert_verdicts([v['code']], test_list=[v['tests']])]"
    got, spent = _trainer_cpu(call, code=code, tests=["assert set(square(2)) == {4}"])
    assert isinstance(got, list) and len(got) == 1
    passed, reason = got[0]
    assert not passed and "hash collisions" in reason
    assert spent < 0.5, f"{spent:.2f} s of trainer CPU"
