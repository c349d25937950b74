"""Tic-tac-toe engine, SPIRAL's payoffs (invalid −1.5 / +0.5), the turn cap, and the two opponents."""

from __future__ import annotations

import random
from itertools import product

import pytest

from training_core.selfplay.opponents import minimax_move, optimal_moves, random_move
from training_core.selfplay.tictactoe import TicTacToe, winner


def _play(moves: list[int | None], max_turns: int = 50) -> TicTacToe:
    g = TicTacToe(max_turns=max_turns)
    for m in moves:
        g.step(m)
    return g


def test_player_0_is_o_and_moves_first_and_a_line_wins() -> None:
    g = _play([0, 3, 1, 4, 2])  # O: 0 1 2 (top row)
    assert g.board[:3] == ["O", "O", "O"] and g.board[3:5] == ["X", "X"]
    assert (g.done, g.result, g.winner, g.turns) == (True, "win", 0, 5)
    assert g.payoffs() == (1.0, -1.0)
    g = _play([0, 2, 1, 4, 8, 6])  # X: 2 4 6 (anti-diagonal)
    assert (g.result, g.winner, g.payoffs()) == ("win", 1, (-1.0, 1.0))


def test_full_board_without_a_line_is_a_draw() -> None:
    g = _play([0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert (g.result, g.payoffs(), g.turns) == ("draw", (0.0, 0.0), 9)
    assert winner(g.board) is None


@pytest.mark.parametrize(
    ("moves", "offender"),
    [([4, 4], 1), ([None], 0), ([0, 1, 9], 0), ([0, -1], 1), ([0, 1, 2, None], 1)],
)
def test_an_invalid_action_ends_the_game_minus_1_5_for_the_offender_plus_0_5_for_the_other(
    moves: list[int | None], offender: int
) -> None:
    g = _play(moves)
    assert (g.done, g.result, g.offender) == (True, "invalid", offender)
    expected = [0.5, 0.5]
    expected[offender] = -1.5
    assert g.payoffs() == tuple(expected)
    assert g.turns == len(moves)
    with pytest.raises(ValueError):
        g.step(5)


def test_the_turn_cap_scores_a_draw() -> None:
    g = _play([0, 1, 2], max_turns=3)
    assert (g.result, g.payoffs(), g.winner) == ("cap", (0.0, 0.0), None)
    with pytest.raises(ValueError, match="not over"):
        TicTacToe().payoffs()


def test_minimax_never_loses_against_every_line_of_play() -> None:
    """Exhaustive: every sequence of the other side's moves against the perfect player, in both roles."""

    def explore(g_moves: list[int], perfect: int) -> None:
        g = _play(g_moves)
        if g.done:
            assert not (g.result == "win" and g.winner != perfect), g_moves
            return
        if g.player == perfect:
            for m in optimal_moves(g.board, perfect):
                explore([*g_moves, m], perfect)
        else:
            for m in g.available():
                explore([*g_moves, m], perfect)

    explore([], 0)
    explore([], 1)


def test_minimax_takes_a_win_and_blocks_a_loss_and_random_stays_legal() -> None:
    rng = random.Random(0)
    board = ["O", "O", "", "X", "X", "", "", "", ""]
    assert minimax_move(board, 0, rng) == 2  # win now
    assert optimal_moves(["O", "O", "", "", "X", "", "", "", ""], 1) == [2]  # block
    assert optimal_moves(["O", "O", "", "X", "", "", "", "", ""], 1) == [2]  # lost anyway (fork): still block
    assert sorted(optimal_moves([""] * 9, 0)) == list(range(9))  # every opening keeps the draw
    for cells in product(["", "O", "X"], repeat=3):
        b = [*cells, "O", "X", "", "", "", ""]
        assert b[random_move(b, 0, rng)] == ""
