"""From finished games to turn samples with role-conditioned advantages, and the policy-gradient step.

Every turn of a player gets that player's advantage (γ = 1: the whole game's return, on that turn's
response tokens); turns with advantage exactly 0 are dropped (SPIRAL's filter_zero_adv). The loss is
REINFORCE on the response tokens with the Dr GRPO aggregation (masked sum / max_completion_length,
Liu et al. 2025), no KL, built from ``training_core.rl`` (CS336 assignment 5 names). With
``num_iterations`` > 1 (SPIRAL: 2 PPO epochs) the later epochs are off-policy, so the loss becomes
GRPO-clip against the log-probs of the policy that played; with one epoch that is the same gradient
as plain REINFORCE with the advantage, which is what runs then (no extra forward pass).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from training_core.selfplay.rae import RoleBaselines
from training_core.selfplay.rollout import Game


@dataclass
class Sample:
    prompt: str
    response: str
    advantage: float
    player: int


def turn_samples(
    games: list[Game], baselines: RoleBaselines, game_name: str, drop_zero: bool
) -> tuple[list[Sample], list[float], int]:
    """Samples of finished games in order (each game: player 0's baseline, then player 1's, each read
    before it is updated). Returns the kept samples, every turn's advantage (dropped ones too) and how
    many were dropped."""
    kept: list[Sample] = []
    all_adv: list[float] = []
    dropped = 0
    for g in games:
        payoffs = g.game.payoffs()
        for player in (0, 1):
            turns = [t for t in g.turns if t.player == player]
            if not turns:
                continue  # a fixed opponent's role: nothing to train, its baseline untouched
            adv = baselines.advantage(game_name, player, payoffs[player])
            for t in turns:
                all_adv.append(adv)
                if drop_zero and adv == 0.0:
                    dropped += 1
                    continue
                kept.append(Sample(t.prompt, t.response, adv, player))
    return kept, all_adv, dropped


def subsample(samples: list[Sample], n: int, rng: random.Random) -> list[Sample]:
    """``n`` samples drawn without replacement (SPIRAL draws rollout_batch_size of the collected turns)."""
    return samples if len(samples) <= n else rng.sample(samples, n)


@dataclass
class UpdateSettings:
    max_completion_length: int  # Dr GRPO divisor
    micro_batch_size: int
    epochs: int  # PPO epochs over the batch; one optimizer step each
    cliprange: float
    max_grad_norm: float


def policy_update(
    model: Any, tokenizer: Any, optimizer: Any, scheduler: Any, samples: list[Sample], s: UpdateSettings
) -> dict[str, float]:
    """One optimizer step per epoch over ``samples``; returns loss/grad metrics (means over epochs)."""
    import torch

    from training_core.rl import (
        get_response_log_probs,
        grpo_microbatch_train_step,
        tokenize_prompt_and_output,
    )

    device = next(model.parameters()).device
    micro = []
    for i in range(0, len(samples), s.micro_batch_size):
        chunk = samples[i : i + s.micro_batch_size]
        batch = tokenize_prompt_and_output([c.prompt for c in chunk], [c.response for c in chunk], tokenizer)
        batch = {k: v.to(device) for k, v in batch.items()}
        adv = torch.tensor([[c.advantage] for c in chunk], dtype=torch.float32, device=device)  # (B, 1)
        micro.append((batch, adv))
    old: list[torch.Tensor | None] = [None] * len(micro)
    clipped = s.epochs > 1
    if clipped:
        with torch.no_grad():
            old = [get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"] for b, _ in micro]
    model.train()
    losses, norms, clip_fracs = [], [], []
    for _ in range(s.epochs):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for (batch, adv), old_lp in zip(micro, old, strict=True):
            logp = get_response_log_probs(model, batch["input_ids"], batch["labels"])["log_probs"]  # (B, T)
            loss, meta = grpo_microbatch_train_step(
                logp,
                batch["response_mask"],
                len(micro),
                "grpo_clip" if clipped else "reinforce_with_baseline",
                advantages=adv,
                old_log_probs=old_lp,
                cliprange=s.cliprange if clipped else None,
                normalize_constant=s.max_completion_length,
            )
            total += float(loss.detach())
            if "clip_fraction" in meta:
                clip_fracs.append(float(meta["clip_fraction"]))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
        optimizer.step()
        scheduler.step()
        losses.append(total)
        norms.append(float(norm))
    out = {
        "loss/total": sum(losses) / len(losses),
        "grad/norm": sum(norms) / len(norms),
        "optim/lr": float(scheduler.get_last_lr()[0]),
    }
    if clip_fracs:
        out["loss/clip_fraction"] = sum(clip_fracs) / len(clip_fracs)
    return {k: (v if math.isfinite(v) else float("nan")) for k, v in out.items()}
