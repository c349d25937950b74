"""Rows of a registered dataset in the shapes TRL's SFT and DPO trainers read; torch-free.

SFT gets ``{"prompt", "completion"}`` (TRL's prompt-completion format, whose loss covers the
completion's tokens only); DPO gets ``{"prompt", "chosen", "rejected"}``. Both take the prompt
through ``build_dataset`` like GRPO does (plain text or chat messages, long prompts dropped), so the
three methods see the same prompts. A dataset without dispreferred responses gets, per row, another
row's different answer (a wrong answer for arithmetic), drawn with the run's seed.
"""

from __future__ import annotations

import random
from typing import Any

from training_core.config import DataConfig, RunConfig
from training_core.data.loaders import Row, build_dataset
from training_core.errors import UsageError


def response(text: Any, data: DataConfig) -> Any:
    """A response in the prompt's style: the text itself (plain) or one assistant message (chat)."""
    if data.prompt_style == "plain":
        return str(text)
    return [{"role": "assistant", "content": str(text)}]


def _need(rows: list[Row], column: str, setting: str, dataset: str) -> None:
    if rows and column not in rows[0]:
        raise UsageError(
            f"{setting} = {column!r} is not a column of dataset {dataset!r}; "
            f"columns: {', '.join(sorted(rows[0]))}"
        )


def sft_rows(rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
    col = cfg.sft.response_column
    _need(rows, col, "sft.response_column", cfg.data.dataset)
    return [
        {"prompt": r["prompt"], "completion": response(r[col], cfg.data)}
        for r in build_dataset(rows, cfg.data, tokenizer)
    ]


def wrong_answers(chosen: list[str], seed: int) -> list[str]:
    """For each chosen response, another row's chosen response that differs from it (seeded)."""
    pool = sorted(set(chosen))
    if len(pool) < 2:
        raise UsageError("every row has the same chosen response: no other row's can be the rejected one")
    rng = random.Random(seed)
    out = []
    for c in chosen:
        pick = rng.choice(pool)
        while pick == c:
            pick = rng.choice(pool)
        out.append(pick)
    return out


def dpo_rows(rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
    d = cfg.dpo
    _need(rows, d.chosen_column, "dpo.chosen_column", cfg.data.dataset)
    kept = build_dataset(rows, cfg.data, tokenizer)
    chosen = [str(r[d.chosen_column]) for r in kept]
    # rows that name their rejected response keep it; the others get a drawn wrong answer
    drawn: list[Any] = (
        [None] * len(kept) if all(d.rejected_column in r for r in kept) else wrong_answers(chosen, cfg.seed)
    )
    return [
        {
            "prompt": r["prompt"],
            "chosen": response(c, cfg.data),
            "rejected": response(r.get(d.rejected_column, x), cfg.data),
        }
        for r, c, x in zip(kept, chosen, drawn, strict=True)
    ]
