"""Dr GRPO's math as small pure functions (Liu et al. 2025, "Understanding R1-Zero-Like Training").

TRL's GRPOTrainer computes these inside ``_compute_loss`` when configured with
``loss_type="dr_grpo"``, ``scale_rewards="none"``, ``beta=0``; these functions state the same math
in the paper's terms so tests can pin TRL to it (tests/training/test_drgrpo.py) and readers can see
what the two changes against GRPO are. Shapes: G = group size (num_generations), B = completions
in the batch (a multiple of G), T = completion tokens (padded), L = max_completion_length.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr GRPO advantage: A_i = r_i - mean(r of i's group), no division by the group's std.

    rewards: (B,) with each group's G completions adjacent -> (B,). Dividing by std (GRPO) up-weights
    groups whose rewards barely differ (too easy or too hard questions): the difficulty bias.
    """
    grouped = rewards.view(-1, group_size)  # (B/G, G)
    return (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)  # (B,)


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Original GRPO advantage (for comparison): (r_i - mean) / (std + eps) per group. (B,) -> (B,)."""
    grouped = rewards.view(-1, group_size)  # (B/G, G)
    std = grouped.std(dim=1, keepdim=True)  # (B/G, 1), unbiased like TRL's nanstd
    return ((grouped - grouped.mean(dim=1, keepdim=True)) / (std + eps)).view(-1)  # (B,)


def clipped_token_objective(
    logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, epsilon: float = 0.2
) -> torch.Tensor:
    """Per-token PPO-clip loss: -min(ratio * A, clip(ratio, 1-eps, 1+eps) * A).

    logps, old_logps: (B, T) log-probs of the sampled tokens; advantages: (B,) -> (B, T).
    """
    ratio = torch.exp(logps - old_logps)  # (B, T)
    adv = advantages.unsqueeze(1)  # (B, 1)
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)  # (B, T)


def dr_grpo_loss(
    per_token_loss: torch.Tensor, mask: torch.Tensor, max_completion_length: int
) -> torch.Tensor:
    """Dr GRPO aggregation: sum over every completion token / (B * L), L a constant. -> scalar.

    per_token_loss, mask: (B, T). GRPO divides each completion by its own length |o_i| instead, which
    shrinks the penalty on long wrong answers (the length bias); a constant L removes it. L must be
    pinned (train.max_completion_length) because it is the divisor.
    """
    return (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)


def grpo_loss(per_token_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Original GRPO aggregation (for comparison): mean over completions of each one's token mean."""
    per_seq = (per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B,)
    return per_seq.mean()
