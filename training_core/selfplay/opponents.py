"""Fixed opponents for evaluation: a uniformly random legal move (SPIRAL's RandomAgent) and a perfect
player (negamax over the whole game tree, cached: it wins soonest, loses latest, and breaks ties at
random so games vary)."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache

from training_core.selfplay.tictactoe import MARKS, legal_moves, winner

Opponent = Callable[[list[str], int, random.Random], int]


def random_move(board: list[str], player: int, rng: random.Random) -> int:
    return rng.choice(legal_moves(board))


def _score(board: tuple[str, ...], move: int, player: int) -> int:
    """Negamax score of ``move`` for ``player``: a win scores 10 minus the marks then on the board, so
    a sooner win beats a later one and a lost position still blocks (a later loss scores higher)."""
    nxt = (*board[:move], MARKS[player], *board[move + 1 :])
    if winner(nxt) == player:
        return 10 - sum(1 for c in nxt if c)
    return -_value(nxt, 1 - player)


@cache
def _value(board: tuple[str, ...], player: int) -> int:
    """Best score for ``player`` to move: > 0 a win, 0 a draw, < 0 a loss under perfect play."""
    moves = legal_moves(board)
    return max((_score(board, m, player) for m in moves), default=0)


def optimal_moves(board: list[str] | tuple[str, ...], player: int) -> list[int]:
    """Every move with the best score for ``player``."""
    b = tuple(board)
    scored = [(_score(b, m, player), m) for m in legal_moves(b)]
    top = max(v for v, _ in scored)
    return [m for v, m in scored if v == top]


def minimax_move(board: list[str], player: int, rng: random.Random) -> int:
    return rng.choice(optimal_moves(board, player))


OPPONENTS: dict[str, Opponent] = {"random": random_move, "minimax": minimax_move}
