"""What a player sees and how its answer becomes a move.

``observation`` reproduces TextArena's TicTacToe-v0 under SPIRAL's FirstLastObservationWrapper: the role
prompt, the current board (free cells show their number), ``Available Moves: '[0]', ...`` and
``Next Action:``. ``spiral_prompt`` wraps it in SPIRAL's instruction (arXiv 2506.24119, spiral/template.py),
to be rendered with the model's chat template. ``board_prompt`` is the short form for the tiny
character-level model (no chat template, 64 positions, lower-case vocabulary): the nine cells with free
ones numbered, then the player's mark, e.g. ``"o1x345678x:"``. ``parse_action`` is SPIRAL's
``extract_action``: the last ``\\boxed{...}`` (else the whole text), a short bare answer bracketed, and
anything that is not exactly one of the available ``[n]`` is invalid.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from training_core.selfplay.tictactoe import MARKS

INSTRUCTION = "You are playing a two-player zero-sum game. Make valid actions to win."
ANSWER_FORMAT = "Please reason step by step, and put your final answer within \\boxed{}."
PromptKind = Literal["spiral", "board"]


def role_prompt(player: int) -> str:
    """TextArena TicTacToe-v0's per-player prompt (player 0 is 'O', player 1 is 'X')."""
    return (
        f"You are Player {player} in Tic Tac Toe.\n"
        "Your goal is to win three in a row (horizontally, vertically, or diagonally) on the board.\n"
        "On your turn, you should select the square number (0-8) you want to put your mark in next.\n"
        "For example, '[4]' places your mark in the center cell of the board.\n\n"
        f"As Player {player}, you will be '{MARKS[player]}', while your opponent is '{MARKS[1 - player]}'.\n"
    )


def render_board(board: list[str]) -> str:
    rows = ("|".join(f" {board[r * 3 + c] or r * 3 + c} " for c in range(3)) for r in range(3))
    return "\n---+---+---\n".join(rows)


def observation(board: list[str], player: int) -> str:
    moves = ", ".join(f"'[{i}]'" for i, v in enumerate(board) if not v)
    state = f"Current Board:\n\n{render_board(board)}\n\nAvailable Moves: {moves}"
    return f"{role_prompt(player)}\n\n{state}\n\nNext Action:"


def spiral_prompt(board: list[str], player: int) -> str:
    """The user message of SPIRAL's template (spiral/template.py, apply_qwen3_template)."""
    return f"{INSTRUCTION}\nObservation: {observation(board, player)}\n{ANSWER_FORMAT}"


def board_prompt(board: list[str], player: int) -> str:
    cells = "".join(v.lower() if v else str(i) for i, v in enumerate(board))
    return f"{cells}{MARKS[player].lower()}:"  # no space: the tiny tokenizer drops whitespace


def render(board: list[str], player: int, kind: PromptKind, style: str, tokenizer: Any) -> str:
    """The text the model is conditioned on. ``style`` "chat" renders the user message with the
    tokenizer's chat template (a model without one is refused at start, not silently sent raw text);
    "plain" is the message itself."""
    text = spiral_prompt(board, player) if kind == "spiral" else board_prompt(board, player)
    if style != "chat":
        return text
    messages = [{"role": "user", "content": text}]
    return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with nested braces, or None (SPIRAL's last_boxed_only_string
    + remove_boxed; a ``\\text{...}`` wrapper inside is removed)."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    depth, i = 0, start
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    else:
        return None
    whole = text[start : i + 1]
    if not whole.startswith("\\boxed{"):
        return None  # "\boxed 4" and the like
    inner = whole[len("\\boxed{") : -1]
    if inner.startswith("\\text{") and inner.endswith("}"):
        inner = inner[len("\\text{") : -1]
    return inner


def format_action(text: str) -> str:
    """The action string SPIRAL sends to the environment, e.g. ``"[4]"``."""
    if not text:
        return ""
    raw = _last_boxed(text)
    if raw is None:
        raw = text.strip()
    action = re.sub(r"\\boxed\{([^}]*)\}", r"[\1]", raw)
    if "[" not in action and "]" not in action and len(action.split()) <= 5:
        action = f"[{action}]"
    return re.sub(r"\s+", " ", action).strip()


def parse_action(text: str, available: list[int]) -> int | None:
    """The cell the answer names, or None when it is not exactly one of the available ``[n]``."""
    action = format_action(text)
    for cell in available:
        if action == f"[{cell}]":
            return cell
    return None
