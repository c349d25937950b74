"""A GRPO step sized for the GPU it runs on, where the recipe leaves it ``auto`` (docs/training.md, "The
step's settings").

``train.per_device_train_batch_size = 0`` and ``model.gradient_checkpointing = "auto"`` are settled at run
start, like the precision (``settle``), so the run header shows what ran. The step trains
``train.generation_batch_size`` completions on-policy: the micro-batch times the accumulation is exactly
the generation batch, so TRL generates once per optimizer step and needs no second forward for old
log-probabilities. The largest micro-batch (a power of two dividing the batch) of at least ``MIN_MICRO``
whose estimated peak stays under ``BUDGET`` of the card is taken without gradient checkpointing; only
when none fits is checkpointing turned on (then the largest micro-batch that fits with it). Without a GPU
the step is one micro-batch and no checkpointing (the CPU path).

The estimate (bytes): weights, gradients and AdamW's two moments (2 + 2 + 4 per weight in bf16; 4 + 4 + 8
with fp32 weights), plus the larger of the training activations and the generation's KV cache, since the
two phases do not overlap. Activations per token and layer follow Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", 34·h bytes in 16-bit with a 4h MLP; the attention
score term is gone under SDPA's fused kernels), scaled to the model's MLP width; with checkpointing only
the layer inputs are kept, plus one layer's activations. The LM head's fp32 logits over the completion
tokens (and their gradient) come on top. An estimate, not a measurement: the budget keeps a tenth spare.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from training_core.config import Resolved

BUDGET = 0.9  # share of the card's memory the estimate may fill
MIN_MICRO = 8  # sequences per micro-step worth giving up checkpointing for (smaller GEMMs underfeed a GPU)


@dataclass(frozen=True)
class Dims:
    """What the estimate needs of a model's shape."""

    params: int
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_dim: int  # key/value width per layer (kv heads x head dim)


def dims_of(config: dict[str, Any]) -> Dims:
    """``Dims`` of a Qwen2/Llama-style config (config.json's keys)."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    inter = config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv_dim = config.get("num_key_value_heads", heads) * (config.get("head_dim") or h // heads)
    per_layer = 2 * h * h + 2 * h * kv_dim + 3 * h * inter  # q, o, k, v, gate/up/down
    params = layers * per_layer + vocab * h * (1 if config.get("tie_word_embeddings", True) else 2)
    return Dims(params=params, hidden=h, intermediate=inter, layers=layers, vocab=vocab, kv_dim=kv_dim)


def peak_bytes(
    d: Dims, half: bool, micro: int, prompt: int, completion: int, gen_batch: int, ckpt: bool
) -> float:
    """The estimated peak of a step (module docstring): ``half`` = bf16 weights, ``micro`` sequences of
    ``prompt + completion`` tokens per micro-step, ``gen_batch`` completions generated at once."""
    state = d.params * (8 if half else 16)
    seq = prompt + completion
    per_token_layer = 34 * d.hidden * (d.intermediate / (4 * d.hidden) + 1) / 2  # 16-bit activations
    if ckpt:
        acts = micro * seq * (d.layers * 2 * d.hidden + per_token_layer)
    else:
        acts = micro * seq * d.layers * per_token_layer
    logits = micro * completion * d.vocab * 4 * 2
    kv_cache = gen_batch * seq * d.layers * 2 * d.kv_dim * 2
    return state + max(acts + logits, kv_cache)


@dataclass(frozen=True)
class Step:
    per_device: int
    accumulation: int
    checkpointing: bool
    estimate_gb: float


def plan(d: Dims, gpu_gb: float, half: bool, batch: int, prompt: int, completion: int) -> Step:
    """The micro-batch and checkpointing for ``batch`` completions on a card of ``gpu_gb``."""
    micros = [m for m in (2**i for i in range(12, -1, -1)) if m <= batch and batch % m == 0]
    floor = min(MIN_MICRO, batch)  # below it, checkpointing with a bigger micro-batch keeps the GPU busier
    for ckpt, sizes in ((False, [m for m in micros if m >= floor]), (True, micros)):
        for m in sizes:
            est = peak_bytes(d, half, m, prompt, completion, batch, ckpt)
            if est <= BUDGET * gpu_gb * 1e9:
                return Step(m, batch // m, ckpt, est / 1e9)
    m = micros[-1]
    return Step(m, batch // m, True, peak_bytes(d, half, m, prompt, completion, batch, True) / 1e9)


def largest_batch(
    d: Dims, gpu_gb: float, half: bool, prompt: int, completion: int, per_prompt: int = 8, most: int = 65536
) -> tuple[int, Step] | None:
    """The largest generation batch (a power-of-two number of prompts x ``per_prompt`` completions, up to
    ``most``) whose step the estimate puts at <= ``BUDGET`` of the card, with that step; None when even one
    prompt's completions do not fit. max_gpu's memory goal: the batch, not a share of memory."""
    best = None
    prompts = 1
    while prompts * per_prompt <= most:
        batch = prompts * per_prompt
        step = plan(d, gpu_gb, half, batch, prompt, completion)
        if step.estimate_gb > BUDGET * gpu_gb:
            break
        best = (batch, step)
        prompts *= 2
    return best


def settle(res: Resolved, gpu_gb: float, model_config: Any) -> Resolved:
    """``res`` with an ``auto`` micro-batch and checkpointing settled; ``model_config()`` reads the
    model's config.json only when something is auto. ``gpu_gb`` = 0: no GPU (one micro-batch, no
    checkpointing)."""
    cfg = res.config
    t, m = cfg.train, cfg.model
    auto_batch, auto_ckpt = t.per_device_train_batch_size == 0, m.gradient_checkpointing == "auto"
    if not (auto_batch or auto_ckpt):
        return res
    batch = t.generation_batch
    if auto_batch:
        micro, accumulation = batch, 1
    else:
        micro, accumulation = t.per_device_train_batch_size, t.gradient_accumulation_steps
    step = Step(micro, accumulation, False, 0.0)  # no GPU: the CPU path
    if gpu_gb > 0:
        d = dims_of(model_config())
        half, prompt, completion = m.precision == "bf16", cfg.data.max_prompt_length, t.max_completion_length
        if auto_batch:
            step = plan(d, gpu_gb, half, batch, prompt, completion)
        else:
            est = peak_bytes(d, half, micro, prompt, completion, batch, False)
            step = Step(micro, accumulation, est > BUDGET * gpu_gb * 1e9, est / 1e9)
    if not auto_ckpt:
        step = dataclasses.replace(step, checkpointing=bool(m.gradient_checkpointing))
    print(
        f"step: {step.per_device} completions x {step.accumulation} micro-steps, gradient checkpointing "
        f"{'on' if step.checkpointing else 'off'}"
        + (f" (estimated peak {step.estimate_gb:.1f} GB of {gpu_gb:.0f})" if gpu_gb > 0 else ""),
        flush=True,
    )
    train = t
    if auto_batch:
        train = dataclasses.replace(
            t,
            per_device_train_batch_size=step.per_device,
            gradient_accumulation_steps=step.accumulation,
            generation_batch_size=batch,
        )
    model = dataclasses.replace(m, gradient_checkpointing=step.checkpointing) if auto_ckpt else m
    return dataclasses.replace(res, config=dataclasses.replace(cfg, train=train, model=model))


def model_config(name: str) -> dict[str, Any]:
    """The config.json of the run's model (``tiny``: its spec), without loading weights."""
    if name == "tiny":
        from training_core.models import tiny

        spec = {k: v for k, v in tiny.SPEC.items() if k != "seed"}
        return {**spec, "vocab_size": len(tiny.SPECIALS) + len(tiny.CHARS), "tie_word_embeddings": True}
    from transformers import AutoConfig

    return dict(AutoConfig.from_pretrained(name).to_dict())
