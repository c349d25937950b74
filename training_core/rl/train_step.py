"""One microbatch of SFT or policy-gradient training: loss, gradient-accumulation scaling, backward.

Both return the scaled loss (what was backpropagated, for logging) and metadata. Dividing by
``gradient_accumulation_steps`` makes the summed gradients of a step equal those of one big batch.
"""

from __future__ import annotations

import torch

from training_core.rl.masked import masked_mean, masked_normalize
from training_core.rl.policy_gradient import LossType, compute_policy_gradient_loss


def sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood of the response tokens: each sequence's masked sum / normalize_constant,
    averaged over the batch, / gradient_accumulation_steps; calls backward."""
    per_seq = -masked_normalize(
        policy_log_probs, response_mask, dim=-1, normalize_constant=normalize_constant
    )
    loss = per_seq.mean() / gradient_accumulation_steps
    loss.backward()
    n_tokens = response_mask.sum()
    return loss, {"nll_per_sequence": per_seq.detach(), "response_tokens": n_tokens}


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    normalize_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss of a microbatch: per-token loss, per-sequence aggregate, batch mean,
    / gradient_accumulation_steps; calls backward.

    The per-sequence aggregate is ``masked_mean`` over the response (CS336's default, GRPO's length
    normalization); with ``normalize_constant`` (the max completion length) it is ``masked_normalize``
    instead: Dr GRPO's sum / constant (Liu et al. 2025).
    """
    per_token, meta = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )  # (B, T)
    if normalize_constant is None:
        per_seq = masked_mean(per_token, response_mask, dim=-1)  # (B,)
    else:
        per_seq = masked_normalize(per_token, response_mask, dim=-1, normalize_constant=normalize_constant)
    loss = per_seq.mean() / gradient_accumulation_steps
    loss.backward()
    if "clipped" in meta:
        meta = {**meta, "clip_fraction": masked_mean(meta["clipped"].float(), response_mask)}
    return loss, meta
