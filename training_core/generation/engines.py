"""The generation engines of a GRPO run and the order they are tried in (docs/training.md).

- ``hf``: TRL's own HF ``generate()`` as TRL sets it up (dynamic KV cache, ``disable_compile=True``).
- ``static``: the same ``generate()`` on a static KV cache sized once for the longest prompt plus the
  completion cap (every call then fits one cache, so one compiled graph serves the whole run) and, where
  it compiles, its decode step ``torch.compile``'d in ``reduce-overhead`` mode: one CUDA-graph replay per
  decode step instead of a few hundred kernel launches from Python, the launch-bound part of today's step.
- ``paged``: transformers' continuous batching (paged KV cache, requests scheduled as they finish), TRL's
  ``use_transformers_continuous_batching``.
- ``vllm``: TRL's vLLM (``train.vllm_mode``), which TRL builds in its constructor.

``plan`` turns ``generation.engine`` into a ``Plan``: the engines in the order tried (the last one never
fails over) and the one-line notes of engines passed over before the run starts. ``apply`` switches a
built GRPOTrainer to an engine, at the start and on a fallback alike: TRL offers no public setting for
the compile it turns off, so ``apply`` sets the trainer's ``generation_config`` (the object TRL passes to
every ``generate()`` call) and the two attributes TRL reads to choose continuous batching.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from training_core.config import RunConfig

HF = "hf"
# precisions under which TRL's continuous-batching path casts the policy itself to half precision (its
# ``unwrapped_model.to(torch.bfloat16)`` when ``args.bf16``): fp32 master weights would be lost
_CASTS_POLICY = ("bf16_amp", "fp16")


@dataclass(frozen=True)
class Plan:
    """The engines a run tries, in order, and how the static engine compiles."""

    chain: tuple[str, ...] = (HF,)
    notes: tuple[str, ...] = ()  # one line per engine passed over while planning
    compile: bool = False  # torch.compile the static engine's decode step
    compile_all_devices: bool = False  # ...on a CPU too (generation.compile = "on")
    compile_backend: str = "inductor"
    compile_mode: str = "reduce-overhead"
    max_cache_len: int = 0  # static KV cache length: longest prompt + completion cap
    paged_config: dict[str, Any] | None = None  # transformers' ContinuousBatchingConfig fields

    def after(self, engine: str) -> str | None:
        """The engine tried when ``engine`` fails, or None when it is the last."""
        i = self.chain.index(engine)
        return self.chain[i + 1] if i + 1 < len(self.chain) else None


def passed_over(engine: str, why: str, instead: str) -> str:
    """The one line printed when an engine cannot run here."""
    return f"generation engine {engine}: {why}; using {instead}"


def plan(cfg: RunConfig, cuda: bool, vllm_importable: bool) -> Plan:
    """``generation.engine`` resolved for this host: ``cuda`` (a CUDA device trains), ``vllm_importable``."""
    g, t = cfg.generation, cfg.train
    notes: list[str] = []
    fast: tuple[str, ...] = ("static", HF) if cuda else (HF,)  # what auto uses without vLLM
    engine = g.engine
    if engine == "auto":
        chain = ("vllm",) if t.use_vllm else fast
    elif engine == "vllm":
        if t.use_vllm and vllm_importable and cuda:
            chain = ("vllm",)
        else:
            why = "train.use_vllm is false"
            if not cuda:
                why = "no CUDA GPU"
            if not vllm_importable:
                why = "vLLM is not importable"
            chain = fast
            notes.append(passed_over("vllm", why, chain[0]))
    elif engine == "paged" and cfg.model.precision in _CASTS_POLICY:
        chain = (HF,)
        notes.append(
            passed_over(
                "paged",
                f"TRL casts the policy to half precision for it under model.precision={cfg.model.precision}",
                HF,
            )
        )
    else:
        chain = (engine, HF) if engine != HF else (HF,)
    max_cache = cfg.data.max_prompt_length + t.max_completion_length
    return Plan(
        chain=chain,
        notes=tuple(notes),
        compile=g.compile == "on" or (g.compile == "auto" and cuda),
        compile_all_devices=g.compile == "on" and not cuda,
        compile_backend=g.compile_backend,
        compile_mode=g.compile_mode,
        max_cache_len=max_cache,
        paged_config=None if cuda else cpu_paged_config(cfg.train.generation_batch, max_cache),
    )


def cpu_paged_config(batch: int, max_len: int, page: int = 32) -> dict[str, Any]:
    """A paged cache sized for one generation batch: without CUDA transformers sizes it from host memory
    (seconds of allocation per call on a CPU)."""
    return {
        "page_size": page,
        "num_blocks": batch * math.ceil(max_len / page) + 1,
        "max_batch_tokens": max(256, max_len),
        "max_requests_per_batch": batch,
    }


def apply(trainer: Any, engine: str, p: Plan) -> None:
    """Switch a built GRPOTrainer to ``engine`` (one of the plan's; vLLM only as the first)."""
    gc = getattr(trainer, "generation_config", None)
    if gc is None:  # vLLM: TRL built no HF generation config
        return
    trainer.use_transformers_continuous_batching = engine == "paged"
    if engine == "paged":
        trainer.continuous_batching_config = paged_config(p)
    configure(gc, engine, p, trainer.args.cache_implementation)


def configure(gc: Any, engine: str, p: Plan, plain_cache: str | None = None) -> None:
    """A transformers GenerationConfig set for ``engine``'s generate() (``hf`` and ``paged``: as TRL
    builds it, ``plain_cache`` its cache; ``static``: the static cache and, per the plan, its compile)."""
    static = engine == "static"
    gc.cache_implementation = "static" if static else plain_cache
    gc.max_cache_len = p.max_cache_len if static else None
    gc.disable_compile = not (static and p.compile)
    gc.compile_config = compile_config(p) if static and p.compile else None


def paged_config(p: Plan) -> Any:
    """transformers' ContinuousBatchingConfig of the paged engine."""
    from transformers.generation import ContinuousBatchingConfig

    # TRL's own default share of free GPU memory for the paged cache (0.9 leaves none to train in)
    return ContinuousBatchingConfig(**{"max_memory_percent": 0.5, **(p.paged_config or {})})


def compile_config(p: Plan) -> Any:
    from transformers import CompileConfig

    cc = CompileConfig(fullgraph=False, backend=p.compile_backend, mode=p.compile_mode)
    if p.compile_all_devices:
        # transformers compiles generate() only on accelerators unless this flag is set (its testing knob)
        cc._compile_all_devices = True  # type: ignore[assignment]
    return cc


def for_host(cfg: RunConfig) -> Plan:
    """The plan on this host (CUDA when torch sees a GPU), its notes printed one line each."""
    import importlib.util

    import torch

    p = plan(cfg, torch.cuda.is_available(), importlib.util.find_spec("vllm") is not None)
    for note in p.notes:
        print(note, flush=True)
    return p
