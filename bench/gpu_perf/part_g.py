"""Part G (generation): HF generate() as TRL runs it against each engine (training_core.generation:
static = static KV cache + torch.compile/CUDA graphs, paged = transformers' continuous batching; vLLM where
importable), at batch 64 and 512, 256 new tokens after 200-token prompts, sampling at temperature 0.7, on
the Qwen2.5-0.5B shape with random weights built on the GPU in bf16. Per engine and batch: the first call
(8 new tokens: compile and CUDA-graph capture) timed apart, then one call of 256 new tokens: steady
tokens/s, ms per decode step, peak memory. Then a torch.profiler trace of the fastest engine's steady call:
GPU kernel time against wall time per decode step (how launch-bound it is)."""

from __future__ import annotations

import time
from typing import Any

import _part

NEW, PROMPT, BATCHES = 256, 200, (512, 64)  # 512 first: the step's batch, and the goal's
DRY_NEW, DRY_PROMPT, DRY_BATCHES = 8, 12, (8, 4)  # the dry mode: a CPU's size


def _engines() -> list[str]:
    import importlib.util

    found = ["static", "hf", "paged"]
    return found + (["vllm"] if importlib.util.find_spec("vllm") else [])


def _sync(cuda: bool) -> float:
    import torch

    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def generate(model: Any, engine: str, ids: Any, new: int, plan: Any, cuda: bool) -> int:
    """One generation call of ``engine`` over the prompt batch ``ids``; returns the tokens it wrote."""
    import torch
    from transformers import GenerationConfig

    from training_core.generation import engines

    gc = GenerationConfig(
        max_new_tokens=new,
        do_sample=True,
        temperature=0.7,
        top_p=1.0,
        pad_token_id=0,
        eos_token_id=model.config.vocab_size - 1,
    )  # a filler id: every call runs its length
    if engine == "paged":
        out = model.generate_batch(
            ids.tolist(),
            generation_config=gc,
            continuous_batching_config=engines.paged_config(plan),
            progress_bar=False,
        )
        return sum(len(o.generated_tokens) for o in out.values())
    engines.configure(gc, engine, plan)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
    return int(out.shape[0] * (out.shape[1] - ids.shape[1]))


def measure(
    model: Any, engine: str, batch: int, prompt: int, new: int, plan: Any, cuda: bool
) -> dict[str, Any]:
    import torch

    ids = torch.randint(3, model.config.vocab_size - 1, (batch, prompt), device=model.device)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t = _sync(cuda)
    generate(model, engine, ids, min(8, new), plan, cuda)  # compile, graph capture, cache allocation
    first = _sync(cuda) - t
    t = _sync(cuda)
    tokens = generate(model, engine, ids, new, plan, cuda)
    steady = _sync(cuda) - t
    return {
        "first_call_s": first,
        "steady_s": steady,
        "tokens": tokens,
        "tokens_per_s": tokens / steady,
        "ms_per_decode_step": 1000 * steady / new,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
    }


def profile(
    model: Any, engine: str, batch: int, prompt: int, new: int, plan: Any, cuda: bool
) -> dict[str, Any]:
    """Kernel time against wall time per decode step of one steady call (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity

    ids = torch.randint(3, model.config.vocab_size - 1, (batch, prompt), device=model.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        t = _sync(cuda)
        generate(model, engine, ids, new, plan, cuda)
        wall = _sync(cuda) - t
    events = prof.key_averages()
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"  # the dry mode: operators' CPU time

    def spent(e: Any) -> float:
        return float(getattr(e, attr, 0) or 0) if cuda or e.key.startswith("aten::") else 0.0

    kernel_us = sum(spent(e) for e in events)
    top = sorted(events, key=spent, reverse=True)[:8]
    return {
        "engine": engine,
        "batch": batch,
        "wall_ms_per_step": 1000 * wall / new,
        "kernel_ms_per_step": kernel_us / 1000 / new,
        "kernel_share": kernel_us / 1e6 / wall,
        "top": [(e.key[:80], round(spent(e) / 1000, 2)) for e in top],
    }


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    device = _part.device(a.dry)
    import torch

    from training_core.generation.engines import Plan
    from training_core.models.shapes import QWEN2_0_5B, QWEN2_TOY, build_model

    cuda = device == "cuda"
    new, prompt, batches = (DRY_NEW, DRY_PROMPT, DRY_BATCHES) if a.dry else (NEW, PROMPT, BATCHES)
    model = build_model(
        QWEN2_TOY if a.dry else QWEN2_0_5B, torch.bfloat16 if cuda else torch.float32, device=device
    )
    model.eval()
    plan = Plan(
        chain=("static", "hf"),
        compile=cuda,
        max_cache_len=prompt + new,
        paged_config=None if cuda else {"page_size": 32, "num_blocks": 64, "max_batch_tokens": 256},
    )
    shape = "toy" if a.dry else "Qwen2.5-0.5B"
    results: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"shape": shape, "new_tokens": new, "prompt_tokens": prompt, "engines": results}

    def run_batch(batch: int) -> None:
        for engine in _engines():
            if engine == "vllm":  # colocated vLLM needs its own engine object; part S runs it inside a step
                results.setdefault(engine, {})[str(batch)] = {"skipped": "measured inside the step (part S)"}
                continue
            try:
                r = measure(model, engine, batch, prompt, new, plan, cuda)
            except Exception as e:  # an engine that fails here is a figure too
                r = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"}
            results.setdefault(engine, {})[str(batch)] = r
            _part.write(a.out, "G", a.dry, t0, **out)

    # the goal's batch, then the profile of its fastest engine, then the smaller batch: a time limit
    # that cuts the part loses the least
    big = str(batches[0])
    run_batch(batches[0])
    tps = {e: r[big]["tokens_per_s"] for e, r in results.items() if "tokens_per_s" in r.get(big, {})}
    best = max(tps, key=lambda e: tps[e]) if tps else None
    out["best"], out["best_over_hf"] = best, (tps[best] / tps["hf"] if best and "hf" in tps else None)
    out["profile"] = profile(model, best, int(big), prompt, new, plan, cuda) if best else None
    _part.write(a.out, "G", a.dry, t0, **out)
    for batch in batches[1:]:
        run_batch(batch)
    print(headline(big, tps, out))


def headline(big: str, tps: dict[str, float], out: dict[str, Any]) -> str:
    line = f"generation at batch {big}: " + ", ".join(f"{e} {v:,.0f} tok/s" for e, v in tps.items())
    if out["best_over_hf"]:
        line += f"; best {out['best']} {out['best_over_hf']:.2f}x hf"
    prof = out["profile"]
    if prof:
        line += (
            f"; kernels {prof['kernel_ms_per_step']:.2f} of {prof['wall_ms_per_step']:.2f} ms per decode step"
        )
    return line


if __name__ == "__main__":
    main()
