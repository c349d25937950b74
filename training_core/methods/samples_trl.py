"""GRPO's side of samples.jsonl: ``RecordSamples``, a mixin of our GRPOTrainer that writes a sampled
step's rows right after TRL generated and scored its batch.

TRL 1.16 has no public hook that sees a batch's completions with each reward function's value and the
advantages (its ``log_completions`` table goes to W&B / trackio only, and its ``_logs`` buffer is
private), so two of its methods are extended additively, as TRL's own subclasses do: ``_calculate_rewards``
(its answer, the per-function rewards of the whole batch, is kept) and ``_generate_and_score_completions``
(its output holds the completion tokens and advantages). Both are called with ``super()`` and their
results returned unchanged; TRL is pinned (pyproject), and tests/training/test_samples.py fails when
either stops delivering rows.
"""

from __future__ import annotations

import math
from typing import Any

from training_core.run.samples import NullSamples, SamplesWriter, prompt_text


class RecordSamples:
    samples: SamplesWriter = NullSamples()
    _pippa_rewards: Any = None
    _pippa_sampled = -1

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids: Any) -> Any:
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids)  # type: ignore[misc]
        self._pippa_rewards = rewards
        return rewards

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        out = super()._generate_and_score_completions(inputs)  # type: ignore[misc]
        step = int(self.state.global_step) + 1  # type: ignore[attr-defined]  # the step this batch trains
        if self.model.training and step != self._pippa_sampled and self.samples.due(step):  # type: ignore[attr-defined]
            self._pippa_sampled = step
            self.samples.write(batch_rows(self, inputs, out, step))
        return out


def spread(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (one per group when the groups outnumber ``k``)."""
    k = min(n, k)
    return [int(j * n / k) for j in range(k)] if k > 0 else []


def batch_rows(
    trainer: Any, inputs: list[dict[str, Any]], out: dict[str, Any], step: int
) -> list[dict[str, Any]]:
    """This process's rows of the batch, ``samples.per_step`` of them: prompt, completion (decoded
    without special tokens), each reward function's value, the weighted total, the advantage, the
    completion's tokens up to its end-of-sequence token and whether it ran into the length cap."""
    writer: SamplesWriter = trainer.samples
    tok = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    ends = {*trainer.eos_token_ids, tok.pad_token_id}
    picked = spread(len(inputs), writer.per_step)
    ids = out["completion_ids"][picked].tolist()  # (K, T) padded: only the kept rows leave the device
    adv = out["advantages"][picked].tolist()  # (K,)
    rewards = trainer._pippa_rewards  # (B_all, F), gathered: on rank 0 this process's rows come first
    names = list(trainer.reward_func_names)
    weights = trainer.reward_weights.tolist()
    rows = []
    for k, i in enumerate(picked):
        toks = ids[k]
        end = next((j for j, t in enumerate(toks) if t in ends), None)
        per_fn = rewards[i].tolist() if rewards is not None else []
        values = {n: (None if math.isnan(v) else v) for n, v in zip(names, per_fn, strict=False)}
        scored = [w * v for w, v in zip(weights, per_fn, strict=False) if not math.isnan(v)]
        row = writer.row(
            step,
            "train",
            prompt_text(inputs[i].get("prompt")),
            tok.decode(toks[: end if end is not None else len(toks)], skip_special_tokens=True),
            index=i,
            rewards=values,
            reward=sum(scored) if scored else None,
            advantage=adv[k],
            length=end + 1 if end is not None else len(toks),
            truncated=end is None,
            answer=inputs[i].get("answer"),
        )
        rows.append(row)
    return rows
