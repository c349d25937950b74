"""Per-instance DPO loss (Rafailov et al. 2023), as CS336 spring 2025 assignment 5 defines it.

The two sequences are the Alpaca-formatted prompt + response + EOS. The prompt's log-probability
cancels in log pi(x+y_w) - log pi(x+y_l), so whole-sequence log-probabilities suffice.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from training_core.data.prompts import ALPACA_TEMPLATE


def _sequence_log_prob(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[1:] | ids[0]) summed: (L,) -> scalar, on the model's device."""
    ids = ids.to(next(model.parameters()).device).unsqueeze(0)  # (1, L)
    logits = model(ids).logits[:, :-1].float()  # (1, L-1, V)
    return F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).sum()


def per_instance_dpo_loss(
    lm: Any,
    lm_ref: Any,
    tokenizer: Any,
    beta: float,
    prompt: str,
    response_chosen: str,
    response_rejected: str,
) -> torch.Tensor:
    """-log sigmoid(beta * [(log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))]), a scalar on
    ``lm``'s device (the reference model may sit on another device)."""
    eos = tokenizer.eos_token or ""

    def ids(response: str) -> torch.Tensor:
        text = ALPACA_TEMPLATE.format(instruction=prompt, response=response) + eos
        return torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long)

    chosen, rejected = ids(response_chosen), ids(response_rejected)
    device = next(lm.parameters()).device
    with torch.no_grad():
        ref_margin = (_sequence_log_prob(lm_ref, chosen) - _sequence_log_prob(lm_ref, rejected)).to(device)
    margin = _sequence_log_prob(lm, chosen) - _sequence_log_prob(lm, rejected)
    return -F.logsigmoid(beta * (margin - ref_margin))
