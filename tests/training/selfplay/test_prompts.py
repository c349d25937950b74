"""TextArena TicTacToe-v0's observation under SPIRAL, SPIRAL's prompt, and SPIRAL's move parsing."""

from __future__ import annotations

import pytest

from training_core.selfplay.prompts import (
    board_prompt,
    format_action,
    observation,
    parse_action,
    render,
    spiral_prompt,
)

BOARD = ["O", "", "X", "", "", "", "", "", ""]


def test_observation_has_the_role_prompt_board_available_moves_and_next_action() -> None:
    obs = observation(BOARD, 1)
    assert obs.startswith("You are Player 1 in Tic Tac Toe.\n")
    assert "As Player 1, you will be 'X', while your opponent is 'O'.\n\n\nCurrent Board:\n\n" in obs
    assert " O | 1 | X \n---+---+---\n 3 | 4 | 5 \n---+---+---\n 6 | 7 | 8 " in obs
    assert obs.endswith("Available Moves: '[1]', '[3]', '[4]', '[5]', '[6]', '[7]', '[8]'\n\nNext Action:")
    assert "you will be 'O', while your opponent is 'X'" in observation(BOARD, 0)


def test_spiral_prompt_wraps_the_observation_and_asks_for_a_boxed_answer() -> None:
    p = spiral_prompt(BOARD, 0)
    assert p.startswith(
        "You are playing a two-player zero-sum game. Make valid actions to win.\nObservation: "
    )
    assert p.endswith("Next Action:\nPlease reason step by step, and put your final answer within \\boxed{}.")


class _Chat:
    chat_template = "x"

    def apply_chat_template(self, messages: list[dict[str, str]], **kw: object) -> str:
        assert kw == {"add_generation_prompt": True, "tokenize": False}
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_render_uses_the_chat_template_for_chat_and_the_raw_text_for_plain() -> None:
    assert render(BOARD, 0, "spiral", "chat", _Chat()) == f"<user>{spiral_prompt(BOARD, 0)}</user><assistant>"
    assert render(BOARD, 1, "board", "plain", None) == "o1x345678x:"
    assert board_prompt([""] * 9, 0) == "012345678o:"


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("I take the centre. \\boxed{4}", "[4]"),
        ("\\boxed{[4]}", "[4]"),
        ("first \\boxed{1} then \\boxed{7}", "[7]"),  # the last box counts
        ("\\boxed{\\text{[5]}}", "[5]"),
        ("4", "[4]"),  # a short bare answer is bracketed
        ("  [3] ", "[3]"),
        ("I will play [3]", "I will play [3]"),  # has brackets: taken as is, not a move
        ("\\boxed{ 4 }", "[ 4 ]"),
        ("one two three four five six", "one two three four five six"),
        ("", ""),
    ],
)
def test_format_action_follows_spiral_extract_action(text: str, action: str) -> None:
    assert format_action(text) == action


def test_parse_action_accepts_only_an_available_move() -> None:
    available = [1, 3, 4, 5, 6, 7, 8]
    assert parse_action("\\boxed{4}", available) == 4
    assert parse_action("8", available) == 8
    assert parse_action("\\boxed{0}", available) is None  # taken
    assert parse_action("\\boxed{9}", available) is None  # off the board
    assert parse_action("[4] because", available) is None
    assert parse_action("\\boxed{ 4 }", available) is None
    assert parse_action("44", available) is None
    assert parse_action("the answer is 4", available) is None  # no box, no brackets: "[the answer is 4]"
