"""The r1_zero reward: strict format, math-verify equivalence in worker processes (bounded in time,
usable from any thread), format and answer reported apart, and the cheap ways to be paid refused."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from training_core.rewards import build
from training_core.rewards.math_grader import MathGrader
from training_core.rewards.r1_zero import r1_zero, r1_zero_answer, r1_zero_format, r1_zero_reward_fn
from training_core.rl import compute_group_normalized_rewards


def done(answer: str, thinking: str = "1+1 is two") -> str:
    return f"{thinking} </think> <answer> {answer} </answer>"


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (done("2"), "2"),
        (
            "</think><answer>\\frac{1}{2}</answer>",
            "\\frac{1}{2}",
        ),  # no reasoning, no spaces: still the format
        (done("2") + "\nmore text after the answer", "2"),  # a generation may run on; only the block counts
        ("2 <answer> 2 </answer>", None),  # no </think>
        ("<answer> 2 </answer> </think>", None),  # answer before the thinking ends
        (done("   "), None),  # empty answer
        (done("2") + " <answer> 3 </answer>", None),  # two answers: not one of several tries
        (
            "<answer>3</answer> thinking </think> <answer> 2 </answer>",
            None,
        ),  # an answer hidden in the thinking
        ("a </think> b </think> <answer> 2 </answer>", None),
        ("thinking </think> so <answer> 2 </answer>", None),  # words between </think> and <answer>
        ("the answer is 2", None),
    ],
)
def test_format_needs_one_answer_block_right_after_the_thinking(text: str, answer: str | None) -> None:
    assert r1_zero_answer(text) == answer


@pytest.mark.parametrize(
    ("gold", "pred", "right"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("\\frac{1}{2}", "\\frac12", True),
        ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}", True),
        ("\\sqrt{2}", "2^{1/2}", True),
        ("1234", "1,234", True),  # GSM8K's thousands separators
        ("(1,2)", "(1, 2)", True),
        ("2", "-2", False),
        ("2", "1, 2", False),  # a list of tries is a set, not the answer
    ],
)
def test_answers_are_graded_by_mathematical_equivalence(gold: str, pred: str, right: bool) -> None:
    got = r1_zero_reward_fn(done(pred), gold)
    assert got == {"format_reward": 1.0, "answer_reward": float(right), "reward": float(right)}


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("4", "5 = 4"),  # math-verify takes the right-hand side of an equation
        ("17", "1=2=3=17"),  # and the last link of a chain
        ("4", "x = 3 \\lor x = 4"),  # any branch of a disjunction
        ("4", "x = 3 \\vee x = 4"),
        ("4", "3 \\text{ or } 4"),
        ("4", "\\begin{cases} x = 3 \\\\ x = 4 \\end{cases}"),
        ("4", "3 \\\\ 4"),  # several lines
        ("4", "x = 3 \\quad x = 4"),  # several equations
        ("\\frac{1}{2}", "\\frac{1}{2} = 0.5"),  # a true equation is still two answers
        ("2", "\\boxed{1} \\boxed{2}"),  # several candidates
        ("2", "1 or 2"),
    ],
)
def test_an_answer_that_is_not_one_answer_is_a_format_failure(gold: str, pred: str) -> None:
    from training_core.rewards.math_worker import equivalent

    if pred not in ("3 \\text{ or } 4", "\\boxed{1} \\boxed{2}", "1 or 2"):
        assert equivalent(gold, pred)  # math-verify alone pays these: the form check is what refuses them
    assert r1_zero_answer(done(pred)) is None
    assert r1_zero_reward_fn(done(pred), gold) == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
    assert r1_zero([done(pred), done(gold)], answer=[gold, gold]) == [0.0, 1.0]


@pytest.mark.parametrize(
    ("gold", "pred", "right"),
    [
        ("4", "400\\%", False),  # math-verify pays a percent at both scales
        ("20\\%", "0.2", False),
        ("0.2", "20\\%", False),
        ("20\\%", "20", True),  # the scale the ground truth states
        ("20", "20\\%", True),
        ("20\\%", "20 \\text{ percent}", True),
        ("3", "x = 3", True),  # one equation naming the answer is one answer
        ("y = 2x + 1", "y = 2x + 1", True),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
        ("(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)", True),
        ("x \\le 3", "x \\leq 3", True),
    ],
)
def test_a_percent_counts_at_the_scale_the_ground_truth_states(gold: str, pred: str, right: bool) -> None:
    got = r1_zero_reward_fn(done(pred), gold)
    assert got == {"format_reward": 1.0, "answer_reward": float(right), "reward": float(right)}


def test_unformatted_right_answer_earns_nothing_and_format_is_reported_apart() -> None:
    assert r1_zero_reward_fn("the answer is 2", "2") == {
        "format_reward": 0.0,
        "answer_reward": 0.0,
        "reward": 0.0,
    }
    completions = [done("7"), done("8"), "7", [{"role": "assistant", "content": done("7")}]]
    answers = ["7"] * 4
    assert r1_zero(completions, answer=answers) == [1.0, 0.0, 0.0, 1.0]
    assert r1_zero_format(completions, answer=answers) == [1.0, 1.0, 0.0, 1.0]
    assert build("r1_zero", {"wrong": -1.0})(completions, answer=answers) == [1.0, -1.0, -1.0, 1.0]


def test_group_rewards_carry_format_and_answer_rates() -> None:
    responses = [done("4"), done("5"), "4", done("4")]
    _, raw, meta = compute_group_normalized_rewards(r1_zero_reward_fn, responses, ["4"] * 4, 4, 1e-6, False)
    assert raw.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert meta["format_reward_mean"] == 0.75 and meta["answer_reward_mean"] == 0.5


def test_math_verify_own_timeouts_fail_off_the_main_thread_ours_do_not() -> None:
    from math_verify import parse

    errors: list[BaseException] = []
    results: list[list[float]] = []

    def off_main() -> None:
        try:
            parse("\\boxed{1}")  # math-verify's default: signal.alarm, which only the main thread may use
        except ValueError as e:
            errors.append(e)
        results.append(r1_zero([done("\\frac{2}{4}"), done("3")], answer=["0.5", "0.5"]))

    worker = threading.Thread(target=off_main)
    worker.start()
    worker.join(timeout=120)
    assert errors and "threaded environment" in str(errors[0])
    assert results == [[1.0, 0.0]]


def test_grading_leaves_the_callers_sigalrm_handler_alone() -> None:
    def mine(signum: int, frame: Any) -> None:
        raise AssertionError("not ours to fire")

    old = signal.signal(signal.SIGALRM, mine)
    try:
        assert r1_zero([done("9")], answer=["9"]) == [1.0]
        assert signal.getsignal(signal.SIGALRM) is mine
    finally:
        signal.signal(signal.SIGALRM, old)


def test_an_answer_that_hangs_sympy_is_killed_graded_wrong_and_the_grader_recovers() -> None:
    # 3 s: a fresh worker's math-verify import is on the clock, and under load it once took over 1 s
    grader = MathGrader(workers=1, timeout_s=3.0)
    try:
        assert grader.grade("2", "1+1") == "right"  # started and warm, so the clock below is the answer's
        start = time.monotonic()
        assert grader.grade("2", "9^{9^{9^{9}}}") == "timeout"  # sympy would work on this for minutes
        assert time.monotonic() - start < 10 and grader.timeouts == 1
        assert grader.grade("2", "2") == "right"  # a fresh process took over
        assert grader.grade("2", "1" * 600) == "too_long"  # over max_chars: not parsed at all
        verdict = r1_zero_reward_fn(done("9^{9^{9^{9}}}"), "2", grader=grader)
        assert verdict == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
    finally:
        grader.close()
