"""What a GRPO step computes, counted honestly: model FLOPs utilisation (MFU) and hardware FLOPs
utilisation (HFU), per phase (docs/training.md, "What a run reports").

MFU counts the FLOPs the step needs (Chowdhery et al. 2022, PaLM, appendix B): forward 2 and backward 4
FLOPs per weight per token, charged to the weights that really multiply that token. The embedding is a
table lookup (no FLOPs), and TRL runs the LM head only over the completion tokens whose log-probabilities
the loss scores (``logits_to_keep``). So a step of ``tokens`` trained tokens of which ``scored`` are
completion tokens needs ``6·N_body·tokens + 6·N_head·scored`` FLOPs, N_body = the weights outside the
embedding and the head. The old ``6·N·tokens`` charged Qwen2-0.5B's tied 136M-parameter embedding as a
head on every trained token, prompt tokens included. HFU counts what the hardware ran besides:
the generation forward (prompt prefill and one decode step per completion token), the recompute of
gradient checkpointing and the no-grad forward for old log-probabilities when the step is off-policy.
Attention's own FLOPs (the ``QK^T``/``AV`` products) are left out of both, as the 6N convention does;
padding is left out (the token counts are of real tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training_core.config import RunConfig


@dataclass(frozen=True)
class Shape:
    """The weights a token meets: ``body`` (every weight but the embedding and the LM head) and ``head``
    (the LM head's, counted even when tied to the embedding, since the head multiplies)."""

    body: int
    head: int


def shape_of(model: Any) -> Shape:
    """``model``'s split into body and head (unique parameters; a tied head is the embedding matrix)."""
    seen: dict[int, int] = {id(p): p.numel() for p in model.parameters()}
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    emb_ids = {id(p) for p in emb.parameters()} if emb is not None else set()
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    body = sum(n for i, n in seen.items() if i not in emb_ids and i not in head_ids)
    n_head = sum(p.numel() for p in head.parameters()) if head is not None else 0
    return Shape(body=body, head=n_head)


def model_flops(s: Shape, tokens: float, scored: float) -> float:
    """FLOPs a training step needs: 6 per body weight per trained token, 6 per head weight per scored one."""
    return 6.0 * s.body * tokens + 6.0 * s.head * scored


def hardware_flops(
    s: Shape,
    tokens: float,
    scored: float,
    gen_prompt_tokens: float,
    gen_tokens: float,
    recompute: bool,
    old_logprob_forward: bool,
) -> float:
    """FLOPs the GPU ran in a step: the training step, plus a forward of the body for gradient
    checkpointing's recompute, plus a no-grad forward when TRL computes old log-probabilities, plus
    generation (prefill of the prompts, a decode step of body and head per completion token)."""
    fwd = 2.0 * s.body * tokens + 2.0 * s.head * scored
    out = model_flops(s, tokens, scored)
    out += 2.0 * s.body * tokens if recompute else 0.0
    out += fwd if old_logprob_forward else 0.0
    out += 2.0 * s.body * (gen_prompt_tokens + gen_tokens) + 2.0 * s.head * gen_tokens
    return out


@dataclass(frozen=True)
class Setup:
    """What a run's FLOP count needs to know besides the tokens."""

    shape: Shape
    recompute: bool = False  # gradient checkpointing
    old_logprob_forward: bool = False  # see old_logprob_forward()


@dataclass(frozen=True)
class StepCounts:
    """One logged interval of a GRPO run: wall seconds, the generation part of them, and token counts."""

    seconds: float
    gen_seconds: float
    tokens: float  # prompt + completion tokens trained (padding excluded)
    scored: float  # completion tokens (the loss's)
    gen_prompt_tokens: float
    gen_tokens: float


def figures(c: StepCounts, setup: Setup, peak: float | None) -> dict[str, float]:
    """The ``perf/...`` figures of an interval: the generation share and each phase's tokens/s, and with a
    known ``peak`` (the card's dense bf16 FLOP/s) MFU of the train phase and of the whole step, and HFU."""
    out: dict[str, float] = {}
    if c.seconds <= 0:
        return out
    train_s = c.seconds - c.gen_seconds
    out["perf/gen_share"] = c.gen_seconds / c.seconds
    if c.gen_seconds > 0:
        out["perf/gen_tokens_per_s"] = c.gen_tokens / c.gen_seconds
    if train_s > 0:
        out["perf/train_tokens_per_s"] = c.tokens / train_s
    if peak:
        s = setup.shape
        need = model_flops(s, c.tokens, c.scored)
        ran = hardware_flops(
            s,
            c.tokens,
            c.scored,
            c.gen_prompt_tokens,
            c.gen_tokens,
            setup.recompute,
            setup.old_logprob_forward,
        )
        if train_s > 0:
            out["perf/mfu"] = need / train_s / peak
        out["perf/mfu_step"] = need / c.seconds / peak
        out["perf/hfu"] = ran / c.seconds / peak
    return out


def old_logprob_forward(
    per_device: int, accumulation: int, generation_batch: int, num_iterations: int, vllm: bool
) -> bool:
    """Whether TRL 1.16 runs a no-grad forward for old log-probabilities (its ``generate_every`` test in
    ``_generate_and_score_completions``): off-policy steps, or vLLM's importance-sampling correction."""
    steps_per_generation = max(1, generation_batch // max(1, per_device))
    return accumulation % (steps_per_generation * num_iterations) != 0 or vllm


def setup_for(cfg: RunConfig, model: Any, generates: bool = True) -> Setup:
    """A run's FLOP setup: its model's shape, checkpointing, and whether its steps (a method that
    ``generates`` its batch: GRPO) are off-policy."""
    t = cfg.train
    off_policy = generates and old_logprob_forward(
        t.per_device_train_batch_size,
        t.gradient_accumulation_steps,
        t.generation_batch,
        t.num_iterations,
        bool(t.use_vllm),
    )
    return Setup(shape_of(model), cfg.model.gradient_checkpointing is True, off_policy)
