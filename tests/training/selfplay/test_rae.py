"""Role-conditioned advantage estimation: read the baseline, then update it, then A = R − b_old."""

from __future__ import annotations

import pytest

from training_core.selfplay.rae import RoleBaselines
from training_core.selfplay.rollout import Game, Turn
from training_core.selfplay.tictactoe import TicTacToe
from training_core.selfplay.update import subsample, turn_samples


def test_advantage_uses_the_baseline_read_before_the_update() -> None:
    b = RoleBaselines(0.95)
    assert b.advantage("ttt", 0, 1.0) == 1.0  # b was 0: the game's own return is not in it
    assert b.get("ttt", 0) == pytest.approx(0.05)
    assert b.advantage("ttt", 0, 1.0) == pytest.approx(0.95)  # 1 − 0.05
    assert b.get("ttt", 0) == pytest.approx(0.95 * 0.05 + 0.05)
    assert b.get("ttt", 1) == 0.0  # one baseline per role
    assert b.advantage("ttt", 1, -1.5) == -1.5
    assert b.get("other", 0) == 0.0  # and per game


def test_state_round_trips_and_decay_is_checked() -> None:
    b = RoleBaselines(0.9)
    b.advantage("ttt", 1, 0.5)
    c = RoleBaselines(0.9)
    c.load_state_dict(b.state_dict())
    assert c.get("ttt", 1) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        RoleBaselines(1.0)


def _game(moves: list[int | None]) -> Game:
    g = Game(TicTacToe())
    for m in moves:
        g.turns.append(
            Turn(g.game.player, f"p{len(g.turns)}", f"r{len(g.turns)}", "", m is not None, 1, False)
        )
        g.game.step(m)
    return g


def test_every_turn_of_a_player_gets_its_advantage_and_zero_advantages_are_dropped() -> None:
    b = RoleBaselines(0.95)
    win0 = _game([0, 3, 1, 4, 2])  # player 0 wins in 5 turns: 3 of its own, 2 of player 1
    invalid1 = _game([4, None])  # player 1 answers badly: −1.5 for it, +0.5 for player 0
    samples, advs, dropped = turn_samples([win0, invalid1], b, "ttt", drop_zero=True)
    by_prompt = {s.prompt: (s.player, s.advantage) for s in samples[:5]}
    assert by_prompt == {"p0": (0, 1.0), "p2": (0, 1.0), "p4": (0, 1.0), "p1": (1, -1.0), "p3": (1, -1.0)}
    # second game: baselines read after the first game's update (0.05 and -0.05)
    assert [(s.prompt, s.player) for s in samples[5:]] == [("p0", 0), ("p1", 1)]
    assert samples[5].advantage == pytest.approx(0.5 - 0.05)
    assert samples[6].advantage == pytest.approx(-1.5 + 0.05)
    assert (len(advs), dropped) == (7, 0)

    draws = RoleBaselines(0.95)
    kept, advs, dropped = turn_samples([_game([0, 1, 2, 4, 3, 5, 7, 6, 8])], draws, "ttt", drop_zero=True)
    assert (kept, len(advs), dropped) == ([], 9, 9)  # draw at baseline 0: A = 0 everywhere, nothing to learn
    kept, _, _ = turn_samples([_game([0, 1, 2, 4, 3, 5, 7, 6, 8])], RoleBaselines(), "ttt", drop_zero=False)
    assert len(kept) == 9


def test_subsample_draws_without_replacement() -> None:
    import random

    b = RoleBaselines()
    samples, _, _ = turn_samples([_game([0, 3, 1, 4, 2])] * 3, b, "ttt", drop_zero=True)
    picked = subsample(samples, 4, random.Random(0))
    assert len(picked) == 4 and len({id(s) for s in picked}) == 4
    assert subsample(samples, 100, random.Random(0)) == samples
