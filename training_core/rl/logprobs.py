"""From strings to per-token log-probabilities: tokenization with a response mask, entropy, scoring.

Names, arguments and shapes follow CS336 spring 2025 assignment 5. ``labels`` are ``input_ids`` shifted
by one, so position t of every (B, T) tensor here is the prediction of token t+1 of the sequence.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def tokenize_prompt_and_output(
    prompt_strs: list[str], output_strs: list[str], tokenizer: Any
) -> dict[str, torch.Tensor]:
    """Prompt and output tokenized separately (so the boundary is exact), concatenated, right-padded.

    Returns ``input_ids`` (the sequence without its last token), ``labels`` (without its first) and
    ``response_mask`` (True where the label is an output token), each (B, max_len - 1); padding is the
    tokenizer's pad id (its EOS when it has none). The output is tokenized without special tokens:
    a BOS belongs before the prompt, never in the middle of the sequence.
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"{len(prompt_strs)} prompts but {len(output_strs)} outputs")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = tokenizer(list(prompt_strs))["input_ids"]
    outputs = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    seqs = [list(p) + list(o) for p, o in zip(prompts, outputs, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # (B, L)
    resp = torch.zeros((len(seqs), width), dtype=torch.bool)  # (B, L)
    for i, (p, s) in enumerate(zip(prompts, seqs, strict=True)):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        resp[i, len(p) : len(s)] = True
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": resp[:, 1:]}  # (B, L-1)


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution over the vocabulary: (..., V) -> (...).

    H = logsumexp(z) - sum softmax(z) * z, which never exponentiates a large logit.
    """
    lse = torch.logsumexp(logits, dim=-1)  # (...)
    return lse - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def get_response_log_probs(
    model: Any, input_ids: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool = False
) -> dict[str, torch.Tensor]:
    """log p(labels[t] | input_ids[:t+1]) for every position, (B, T), unmasked (the loop masks).

    With ``return_token_entropy`` also the next-token entropy at every position as ``token_entropy``.
    """
    logits = model(input_ids).logits  # (B, T, V)
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    out = {"log_probs": logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)}  # (B, T)
    if return_token_entropy:
        out["token_entropy"] = compute_entropy(logits.float())  # (B, T)
    return out
