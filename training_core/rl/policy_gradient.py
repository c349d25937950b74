"""Group-normalized advantages and per-token policy-gradient losses (CS336 spring 2025 assignment 5).

Shapes: G = group size (completions per prompt, adjacent in the batch), B = rollout batch, T = tokens.
Advantages and rewards enter the losses as (B, 1) and broadcast over T. With ``normalize_by_std=False``
the advantage is Dr GRPO's r - mean(group) (Liu et al. 2025); with True it is GRPO's
(r - mean) / (std + eps) (Shao et al. 2024, DeepSeekMath), std unbiased like TRL's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

LossType = Literal["no_baseline", "reinforce_with_baseline", "grpo_clip"]


def group_normalize(
    raw_rewards: torch.Tensor, group_size: int, advantage_eps: float = 1e-6, normalize_by_std: bool = False
) -> torch.Tensor:
    """(B,) rewards, each group of ``group_size`` adjacent -> (B,) advantages."""
    if raw_rewards.numel() % group_size:
        raise ValueError(f"{raw_rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = raw_rewards.view(-1, group_size)  # (B/G, G)
    centered = grouped - grouped.mean(dim=1, keepdim=True)  # (B/G, G)
    if normalize_by_std:
        centered = centered / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    return centered.reshape(-1)  # (B,)


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Score every response, then normalize within its group -> (advantages (B,), raw (B,), metadata).

    ``reward_fn(response, ground_truth)`` returns a dict with "reward", "format_reward" and
    "answer_reward"; metadata holds their means plus the reward's spread, so a loop can log why a batch
    carries no signal (``frac_zero_std``: groups whose completions all scored the same).
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"{len(rollout_responses)} responses but {len(repeated_ground_truths)} ground truths"
        )
    scores = [reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths, strict=True)]
    raw = torch.tensor([float(s["reward"]) for s in scores], dtype=torch.float32)  # (B,)
    advantages = group_normalize(raw, group_size, advantage_eps, normalize_by_std)  # (B,)
    group_std = raw.view(-1, group_size).std(dim=1) if group_size > 1 else torch.zeros(raw.numel())
    metadata = {
        "reward_mean": raw.mean().item(),
        "reward_std": raw.std().item() if raw.numel() > 1 else 0.0,
        "reward_max": raw.max().item(),
        "reward_min": raw.min().item(),
        "format_reward_mean": sum(float(s.get("format_reward", 0.0)) for s in scores) / len(scores),
        "answer_reward_mean": sum(float(s.get("answer_reward", 0.0)) for s in scores) / len(scores),
        "frac_zero_std": (group_std == 0).float().mean().item(),
    }
    return advantages, raw, metadata


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor
) -> torch.Tensor:
    """-A * log pi(o_t): (B, 1) and (B, T) -> (B, T). Its gradient is REINFORCE's."""
    return -raw_rewards_or_advantages * policy_log_probs  # (B, T)


def compute_grpo_clip_loss(
    advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor, cliprange: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-min(ratio * A, clip(ratio, 1-eps, 1+eps) * A) per token: (B, 1), (B, T), (B, T) -> (B, T).

    metadata["clipped"] (B, T) is True where the clipped term was the smaller one (it set the loss).
    """
    ratio = torch.exp(policy_log_probs - old_log_probs)  # (B, T)
    unclipped = ratio * advantages  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange) * advantages  # (B, T)
    return -torch.min(unclipped, clipped), {"clipped": clipped < unclipped, "ratio": ratio.detach()}


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss (B, T) of ``loss_type``: no_baseline (raw rewards), reinforce_with_baseline
    (advantages), grpo_clip (advantages, old log-probs, cliprange)."""
    if loss_type == "no_baseline":
        if raw_rewards is None:
            raise ValueError("no_baseline needs raw_rewards")
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        if advantages is None:
            raise ValueError("reinforce_with_baseline needs advantages")
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        if advantages is None or old_log_probs is None or cliprange is None:
            raise ValueError("grpo_clip needs advantages, old_log_probs and cliprange")
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    raise ValueError(
        f"unknown loss_type {loss_type!r}; known: no_baseline, reinforce_with_baseline, grpo_clip"
    )
