"""Tic-tac-toe as TextArena's TicTacToe-v0 plays it: player 0 is 'O' and moves first, player 1 is 'X',
cells 0-8 row by row. Payoffs follow SPIRAL: win +1 / loss -1 / draw 0; an invalid action ends the game
with -1.5 for the offender and +0.5 for the other player; a game that reaches the turn cap is a draw.
Pure Python and torch-free, so the tests and the minimax opponent run it without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARKS = ("O", "X")  # player 0, player 1
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
WIN, LOSS, DRAW = 1.0, -1.0, 0.0
INVALID_OFFENDER, INVALID_OTHER = -1.5, 0.5  # SPIRAL's invalid-action payoffs


def winner(board: tuple[str, ...] | list[str]) -> int | None:
    """The player (0 or 1) with three in a row, or None."""
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return MARKS.index(board[a])
    return None


def legal_moves(board: tuple[str, ...] | list[str]) -> list[int]:
    return [i for i, v in enumerate(board) if not v]


@dataclass
class TicTacToe:
    """One game. ``step`` takes the acting player's cell, or None for an action that did not parse to an
    available move; the game ends on a line, a full board, an invalid action or ``max_turns`` turns."""

    max_turns: int = 50  # SPIRAL's cap; a tic-tac-toe game ends by turn 9, so it only matters when lowered
    board: list[str] = field(default_factory=lambda: [""] * 9)
    player: int = 0  # whose turn
    turns: int = 0  # actions taken, the invalid one included
    done: bool = False
    # How it ended: "win" (``winner`` set), "draw" (full board), "invalid" (``offender`` set), "cap".
    result: str = ""
    winner: int | None = None
    offender: int | None = None

    def available(self) -> list[int]:
        return legal_moves(self.board)

    def step(self, cell: int | None) -> None:
        if self.done:
            raise ValueError("the game is over")
        self.turns += 1
        if cell is None or cell not in self.available():
            self.done, self.result, self.offender = True, "invalid", self.player
            return
        self.board[cell] = MARKS[self.player]
        if (w := winner(self.board)) is not None:
            self.done, self.result, self.winner = True, "win", w
        elif not self.available():
            self.done, self.result = True, "draw"
        elif self.turns >= self.max_turns:
            self.done, self.result = True, "cap"
        else:
            self.player = 1 - self.player

    def payoffs(self) -> tuple[float, float]:
        """(player 0, player 1) rewards of the finished game."""
        if not self.done:
            raise ValueError("the game is not over")
        if self.result == "invalid":
            return (
                (INVALID_OFFENDER, INVALID_OTHER) if self.offender == 0 else (INVALID_OTHER, INVALID_OFFENDER)
            )
        if self.result == "win":
            return (WIN, LOSS) if self.winner == 0 else (LOSS, WIN)
        return (DRAW, DRAW)
