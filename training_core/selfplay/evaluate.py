"""Games against fixed opponents: ``n`` against a random-move player and ``n`` against a perfect
(minimax) one, half with the policy as player 0 and half as player 1. Outcomes are the policy's: win,
draw or loss (a loss by an invalid move counts as a loss and also as ``invalid``; the fixed opponents
never make one). Used by the interval eval of a run and by ``python -m training_core.eval --task
tictactoe``; keys are ``eval/vs_<opponent>/<outcome>`` and ``eval/vs_<opponent>/p<role>_<outcome>``.
"""

from __future__ import annotations

import random
import time
from typing import Any

from training_core.selfplay.opponents import OPPONENTS
from training_core.selfplay.rollout import Game, Player, RolloutStats, versus

OUTCOMES = ("win", "draw", "loss", "invalid")
GAME_TASKS = ("tictactoe",)  # eval tasks played as games (python -m training_core.eval --task)


def outcome(g: Game, role: int) -> str:
    if g.game.result == "invalid":
        return "invalid" if g.game.offender == role else "win"
    if g.game.result == "win":
        return "win" if g.game.winner == role else "loss"
    return "draw"


def rates(games_by_role: dict[int, list[Game]]) -> dict[str, float]:
    """win/draw/loss/invalid fractions overall and per role (``invalid`` is also in ``loss``)."""
    out: dict[str, float] = {}
    everything: list[str] = []
    for role, games in games_by_role.items():
        res = [outcome(g, role) for g in games]
        everything += res
        for k in OUTCOMES:
            hits = sum(r == k or (k == "loss" and r == "invalid") for r in res)
            out[f"p{role}_{k}"] = hits / max(1, len(res))
    for k in OUTCOMES:
        out[k] = sum(r == k or (k == "loss" and r == "invalid") for r in everything) / max(1, len(everything))
    out["games"] = float(len(everything))
    return out


def play_eval(player: Player, n: int, seed: int, max_turns: int = 50) -> dict[str, Any]:
    """``{"vs_random": rates, "vs_minimax": rates, "time_s", "examples": one game per opponent and role}``.
    ``n`` games per opponent: ceil(n/2) as player 0, floor(n/2) as player 1."""
    start = time.time()
    stats = RolloutStats()
    res: dict[str, Any] = {}
    examples = []
    for k, (name, opponent) in enumerate(OPPONENTS.items()):
        by_role: dict[int, list[Game]] = {}
        for role in (0, 1):
            count = (n + 1) // 2 if role == 0 else n // 2
            rng = random.Random(seed * 1009 + k * 2 + role)
            by_role[role] = versus(player, opponent, role, count, rng, max_turns, stats) if count else []
            if by_role[role]:
                g = by_role[role][0]
                examples.append(
                    {
                        "opponent": name,
                        "role": role,
                        "board": "".join(c or "." for c in g.game.board),
                        "outcome": outcome(g, role),
                        "actions": [t.action for t in g.turns],
                    }
                )
        res[f"vs_{name}"] = rates(by_role)
    res["time_s"] = time.time() - start
    res["generated_tokens"] = stats.generated_tokens
    res["examples"] = examples
    return res


def eval_metrics(res: dict[str, Any]) -> dict[str, float]:
    """The ``eval/...`` keys of one evaluation (metrics.jsonl eval lines, W&B)."""
    out = {"eval/time_s": float(res["time_s"])}
    for key, value in res.items():
        if key.startswith("vs_"):
            out.update({f"eval/{key}/{k}": v for k, v in value.items()})
    return out


def summary(res: dict[str, Any]) -> str:
    parts = []
    for key, value in res.items():
        if key.startswith("vs_"):
            parts.append(
                f"{key}: win {value['win']:.2f} draw {value['draw']:.2f} loss {value['loss']:.2f} "
                f"(invalid {value['invalid']:.2f})"
            )
    return "; ".join(parts)
