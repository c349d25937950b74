"""Reward functions keep TRL's signature and handle the edge cases the team hit."""

from __future__ import annotations

import pytest

from training_core.errors import UnknownName
from training_core.rewards import registry
from training_core.rewards.format import extract_answer, reasoning_format
from training_core.rewards.math import (
    arithmetic_closeness,
    baseline_correctness,
    baseline_length_penalty,
    gsm8k_correctness,
    gsm8k_length_penalty,
)
from training_core.rewards.text import numbers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("no digits here", []),
        ("it is -5", [-5.0]),
        ("about 3.25 m", [3.25]),
        ("1,234 apples", [1234.0]),
        ("The answer is 42.", [42.0]),
        ("3 + 4 = 7", [3.0, 4.0, 7.0]),
        ("10-3=7", [10.0, 3.0, 7.0]),  # a minus right after a digit is the operator
        ("10 - -3 = 13", [10.0, -3.0, 13.0]),
        ("x=-2", [-2.0]),
        (".5 of it", [0.5]),
        ("-.25", [-0.25]),
        ("", []),
    ],
)
def test_number_extraction_edge_cases(text: str, expected: list[float]) -> None:
    assert numbers(text) == expected


@pytest.mark.parametrize(
    "completion, answer, reward",
    [
        ("The answer is 5.", "5", 1.0),
        ("-5", "-5", 1.0),
        ("9 / 2 = 4.5", "4.5", 1.0),
        ("that is 1,234", "1234", 1.0),
        ("2, 3 and 6", "6", 1.0),
        ("no idea", "5", -1.0),
        ("", "5", -1.0),
        ("15", "5", 1.0),  # the team's rule also accepts the answer as a plain substring
        ("51", "6", -1.0),
        ("half is .5", "0.5", 1.0),
    ],
)
def test_baseline_correctness(completion: str, answer: str, reward: float) -> None:
    assert baseline_correctness([completion], answer=[answer]) == [reward]


def test_baseline_correctness_accepts_chat_completions() -> None:
    chat = [[{"role": "assistant", "content": "It is 42."}]]
    assert baseline_correctness(chat, answer=["42"]) == [1.0]


def test_baseline_length_penalty_curve() -> None:
    got = baseline_length_penalty(["x" * 20, "x" * 60, "x" * 100, "x" * 500, ""])
    assert got == [0.0, -0.5 * (40 / 80) ** 2, -0.5, -0.5, 0.0]


@pytest.mark.parametrize(
    "completion, answer, reward",
    [
        ("so the total is 1,234.", "1234", 1.0),
        ("first 18 then 20", "18", 0.5),
        ("The answer is -3.", "-3", 1.0),
        ("2.50 dollars", "2.5", 1.0),
        ("nothing", "7", -1.0),
        ("", "7", -1.0),
        ("17", "7", -1.0),
        ("10-3=7", "-3", -1.0),  # the subtraction's 3 is not the answer -3
        ("10-3=7", "7", 1.0),
        ("it is .5", "0.5", 1.0),
    ],
)
def test_gsm8k_correctness(completion: str, answer: str, reward: float) -> None:
    assert gsm8k_correctness([completion], answer=[answer]) == [reward]


def test_gsm8k_length_penalty_floor() -> None:
    assert gsm8k_length_penalty(["x" * 50, "x" * 125, "x" * 1000]) == [0.0, -0.05, -0.1]


def test_arithmetic_closeness_is_dense_and_peaks_at_the_answer() -> None:
    got = arithmetic_closeness(["7", "5", "x", "", "-1"], answer=["7"] * 5, scale=8.0)
    assert got == [1.0, 0.75, -1.0, -1.0, 0.0]


def test_arithmetic_closeness_scores_only_a_completion_that_is_one_number() -> None:
    # "06" once scored like "6": the tiny policy collapsed onto a free leading "0" and answered "00".
    got = arithmetic_closeness(["06", "7x", "7 8", " 7 ", "0", "2.5"], answer=["7"] * 6, scale=8.0)
    assert got == [-1.0, -1.0, -1.0, 1.0, 0.125, 0.4375]


def test_reasoning_format() -> None:
    got = reasoning_format(
        [
            "<reasoning>2+2 is 4</reasoning>\n<answer>4</answer>",
            "Sure! <reasoning>r</reasoning> then <answer>4</answer> done",
            "<answer>4</answer><reasoning>r</reasoning>",
            "<reasoning></reasoning><answer>4</answer>",
            "",
        ]
    )
    assert got == [1.0, 0.5, 0.0, 0.5, 0.0]
    assert extract_answer("<answer> 1 </answer> <answer>2</answer>") == "2"
    assert extract_answer("none") is None


def test_registry_binds_params_and_keeps_the_name_trl_logs() -> None:
    fn = registry.build("baseline_length_penalty", {"free_chars": 0, "scale_chars": 1.0})
    assert fn.__name__ == "baseline_length_penalty"
    assert fn(["ab"]) == [-0.5]


def test_reward_factories_receive_the_context() -> None:
    seen = {}

    @registry.register_factory("test_ctx_reward")
    def factory(ctx: registry.RewardContext, bonus: float = 0.0):  # type: ignore[no-untyped-def]
        seen["run_dir"] = ctx.run_dir

        def reward(completions, **_):  # type: ignore[no-untyped-def]
            return [bonus] * len(completions)

        return reward

    try:
        fn = registry.build("test_ctx_reward", {"bonus": 2.0}, registry.RewardContext(run_dir="/r"))
        assert fn(["a", "b"]) == [2.0, 2.0] and fn.__name__ == "test_ctx_reward" and seen["run_dir"] == "/r"
    finally:
        registry.REWARDS.unregister("test_ctx_reward")


def test_one_reward_table_serves_plain_rewards_and_factories() -> None:
    with pytest.raises(UnknownName, match=r"unknown reward 'nope'; known: .*baseline_correctness"):
        registry.build("nope")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_factory("baseline_correctness")(lambda ctx: lambda completions, **_: [])
    with pytest.raises(ValueError, match="use build"):
        registry.get("code_game")
    assert {"baseline_correctness", "code_game"} <= set(registry.names())
