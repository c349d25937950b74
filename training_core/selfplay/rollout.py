"""Whole games with the current policy: in self-play it moves for both roles; in evaluation for one role
against a fixed opponent. Games run in parallel and every ply is one batched HF ``generate`` over the
games still running (they stay in step: the same role moves in all of them).

Each policy turn keeps the prompt text and the response text the model produced (up to and including
its end-of-sequence token, decoded with special tokens so ``tokenize_prompt_and_output`` sees the same
tokens again), the parsed action and whether it was valid.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from training_core.selfplay.opponents import Opponent
from training_core.selfplay.prompts import PromptKind, format_action, parse_action, render
from training_core.selfplay.tictactoe import TicTacToe


@dataclass
class Turn:
    player: int
    prompt: str  # the rendered prompt (chat template applied when the style is "chat")
    response: str  # the generated text with special tokens (what the update trains on)
    action: str  # the action string SPIRAL would send, e.g. "[4]"
    valid: bool
    n_tokens: int  # generated tokens
    truncated: bool  # stopped by max_new_tokens, not by an end-of-sequence token


@dataclass
class Game:
    game: TicTacToe
    turns: list[Turn] = field(default_factory=list)  # the policy's turns only


@dataclass
class Sampling:
    max_new_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0


@dataclass
class RolloutStats:
    generated_tokens: int = 0
    generate_s: float = 0.0


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
    return ids


def _generation_config(model: Any, tokenizer: Any, sampling: Sampling) -> Any:
    """Exactly the sampling asked for: a hub model's generation_config.json (Qwen: top_k 20, top_p 0.8,
    repetition_penalty 1.05) would otherwise change the distribution the policy gradient assumes."""
    from transformers import GenerationConfig

    sample = sampling.temperature > 0
    return GenerationConfig(
        max_new_tokens=sampling.max_new_tokens,
        do_sample=sample,
        temperature=sampling.temperature if sample else 1.0,
        top_p=sampling.top_p if sample else 1.0,
        top_k=0,
        repetition_penalty=1.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=sorted(_eos_ids(model, tokenizer)),
    )


def generate(
    model: Any, tokenizer: Any, prompts: list[str], sampling: Sampling, stats: RolloutStats | None = None
) -> list[tuple[str, str, int, bool]]:
    """(text for parsing, text for training, generated tokens, truncated) per prompt. The prompt is
    tokenized the way ``tokenize_prompt_and_output`` tokenizes it, left-padded for generation."""
    import torch

    start = time.time()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    try:
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        with torch.no_grad():
            out = model.generate(**enc, generation_config=_generation_config(model, tokenizer, sampling))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    eos = _eos_ids(model, tokenizer)
    results = []
    for row in out[:, enc["input_ids"].shape[1] :].tolist():
        # HF fills a finished sequence with pad ids after its EOS; everything before it was sampled.
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), None)
        ids = row if cut is None else row[:cut]
        results.append(
            (
                tokenizer.decode(ids, skip_special_tokens=True),
                tokenizer.decode(ids, skip_special_tokens=False),
                len(ids),
                cut is None,
            )
        )
    if stats is not None:
        stats.generated_tokens += sum(r[2] for r in results)
        stats.generate_s += time.time() - start
    return results


@dataclass
class Player:
    """The policy and how it is prompted and sampled."""

    model: Any
    tokenizer: Any
    prompt: PromptKind
    style: str  # "chat" or "plain"
    sampling: Sampling

    def act(self, games: list[Game], stats: RolloutStats | None = None) -> None:
        """One policy move in each of ``games`` (all unfinished, the same role to move)."""
        prompts = [
            render(g.game.board, g.game.player, self.prompt, self.style, self.tokenizer) for g in games
        ]
        for g, p, (text, full, n, trunc) in zip(
            games, prompts, generate(self.model, self.tokenizer, prompts, self.sampling, stats), strict=True
        ):
            cell = parse_action(text, g.game.available())
            g.turns.append(Turn(g.game.player, p, full, format_action(text), cell is not None, n, trunc))
            g.game.step(cell)


def self_play(player: Player, n_games: int, max_turns: int, stats: RolloutStats | None = None) -> list[Game]:
    """``n_games`` games of the policy against itself, played in parallel."""
    games = [Game(TicTacToe(max_turns=max_turns)) for _ in range(n_games)]
    while active := [g for g in games if not g.game.done]:
        player.act(active, stats)
    return games


def versus(
    player: Player,
    opponent: Opponent,
    role: int,
    n_games: int,
    rng: random.Random,
    max_turns: int = 50,
    stats: RolloutStats | None = None,
) -> list[Game]:
    """``n_games`` games of the policy in ``role`` against a fixed opponent, played in parallel."""
    games = [Game(TicTacToe(max_turns=max_turns)) for _ in range(n_games)]
    while active := [g for g in games if not g.game.done]:
        if active[0].game.player == role:
            player.act(active, stats)
        else:
            for g in active:
                g.game.step(opponent(g.game.board, g.game.player, rng))
    return games
