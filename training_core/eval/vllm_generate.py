"""Greedy generation with vLLM for ``python -m training_core.eval --backend vllm`` (GPU hosts with the
``[vllm]`` install set). The HF ``generate`` path (training_core.eval.greedy) is the reference and runs
everywhere; this one is the fast path for long R1-Zero completions.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from training_core.errors import UsageError


def available() -> bool:
    """vLLM is importable and a CUDA GPU is present (what ``--backend auto`` checks)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def require() -> None:
    """Refuse ``--backend vllm`` in one line before anything heavy is loaded."""
    if not available():
        raise UsageError("--backend vllm needs vLLM installed (the [vllm] install set) and a CUDA GPU")


def make_generate(
    model_path: str, tokenizer: Any, seed: int, gpu_memory_utilization: float = 0.85
) -> Callable[[list[Any], int, tuple[str, ...]], list[str]]:
    """A ``generate_fn(prompts, max_new_tokens, stop)`` backed by one vLLM engine for ``model_path``."""
    require()
    from vllm import LLM, SamplingParams

    from training_core.eval.greedy import render

    llm = LLM(model=model_path, seed=seed, gpu_memory_utilization=gpu_memory_utilization)

    def generate(prompts: list[Any], max_new_tokens: int, stop: tuple[str, ...]) -> list[str]:
        params = SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
        )
        outs = llm.generate([render(p, tokenizer) for p in prompts], params)
        return [o.outputs[0].text for o in outs]

    return generate
