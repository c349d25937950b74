"""Masked reductions over (B, T) per-token tensors (CS336 spring 2025 assignment 5 names).

``masked_mean`` divides each completion by its own length (GRPO, the length bias); ``masked_normalize``
divides the masked sum by a constant, which with the max completion length is Dr GRPO's aggregation
(Liu et al. 2025, "Understanding R1-Zero-Like Training").
"""

from __future__ import annotations

import torch


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the elements where ``mask`` is 1, along ``dim`` (all of them when None).

    A slice with no masked element gives nan (0/0), as ``tensor.mean`` of an empty slice would.
    """
    m = mask.to(tensor.dtype)
    if dim is None:
        return (tensor * m).sum() / m.sum()
    return (tensor * m).sum(dim=dim) / m.sum(dim=dim)


def masked_normalize(
    tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None, normalize_constant: float = 1.0
) -> torch.Tensor:
    """Sum over the elements where ``mask`` is 1, along ``dim`` (all when None), divided by a constant."""
    m = mask.to(tensor.dtype)
    total = (tensor * m).sum() if dim is None else (tensor * m).sum(dim=dim)
    return total / normalize_constant
