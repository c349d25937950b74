"""Dr GRPO's math in the paper's terms (Liu et al. 2025, "Understanding R1-Zero-Like Training").

TRL's GRPOTrainer computes these inside ``_compute_loss`` when configured with
``loss_type="dr_grpo"``, ``scale_rewards="none"``, ``beta=0``; these functions state the same math
through the ``training_core.rl`` building blocks so tests can pin TRL to it
(tests/training/rl/test_drgrpo.py) and readers can see the two changes against GRPO. Shapes: G = group
size (num_generations), B = completions in the batch (a multiple of G), T = completion tokens
(padded), L = max_completion_length.
"""

from __future__ import annotations

import torch

from training_core.rl import compute_grpo_clip_loss, group_normalize, masked_mean, masked_normalize


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr GRPO advantage: A_i = r_i - mean(r of i's group), no division by the group's std.

    rewards: (B,) with each group's G completions adjacent -> (B,). Dividing by std (GRPO) up-weights
    groups whose rewards barely differ (too easy or too hard questions): the difficulty bias.
    """
    return group_normalize(rewards, group_size, normalize_by_std=False)


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Original GRPO advantage (for comparison): (r_i - mean) / (std + eps) per group. (B,) -> (B,)."""
    return group_normalize(rewards, group_size, advantage_eps=eps, normalize_by_std=True)


def clipped_token_objective(
    logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, epsilon: float = 0.2
) -> torch.Tensor:
    """Per-token PPO-clip loss: -min(ratio * A, clip(ratio, 1-eps, 1+eps) * A).

    logps, old_logps: (B, T) log-probs of the sampled tokens; advantages: (B,) -> (B, T).
    """
    return compute_grpo_clip_loss(advantages.unsqueeze(1), logps, old_logps, epsilon)[0]


def dr_grpo_loss(
    per_token_loss: torch.Tensor, mask: torch.Tensor, max_completion_length: int
) -> torch.Tensor:
    """Dr GRPO aggregation: each completion's token sum / L, L a constant, averaged over B -> scalar.

    per_token_loss, mask: (B, T). GRPO divides each completion by its own length |o_i| instead, which
    shrinks the penalty on long wrong answers (the length bias); a constant L removes it. L must be
    pinned (train.max_completion_length) because it is the divisor.
    """
    return masked_normalize(per_token_loss, mask, dim=-1, normalize_constant=max_completion_length).mean()


def grpo_loss(per_token_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Original GRPO aggregation (for comparison): mean over completions of each one's token mean."""
    return masked_mean(per_token_loss, mask, dim=-1).mean()
