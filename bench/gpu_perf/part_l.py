"""Part L (1.5B): pippa's tuned step (part S's B: recipes/max_gpu.toml, 512 completions on-policy, the auto
engine, micro-batch and checkpointing from the memory estimate) on the Qwen2.5-1.5B shape (hidden 1536,
28 layers, 12/2 heads, intermediate 8960) built on the GPU: one warm-up and two measured steps; step
seconds, phase split, tokens/s, corrected train-phase MFU with HFU, peak memory."""

from __future__ import annotations

import time

import _part
import part_s


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    _part.device(a.dry)
    from training_core.models.shapes import QWEN2_5_1_5B, QWEN2_TOY

    shape = "toy" if a.dry else "Qwen2.5-1.5B"
    try:
        b = part_s.arm("B", a.dry, QWEN2_TOY if a.dry else QWEN2_5_1_5B)
    except Exception as e:  # the JSON says why (memory, compile) rather than nothing
        b = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"}
    _part.write(a.out, "L", a.dry, t0, shape=shape, B=b)
    if "error" in b:
        raise SystemExit(f"1.5B step failed: {b['error']}")
    mfu = f"train MFU {100 * b['mfu']:.1f}%, HFU {100 * b['hfu']:.1f}%" if b.get("mfu") else "no MFU (no GPU)"
    print(
        f"1.5B step ({shape}): {b['step_s']:.2f} s, {b['step_tokens_per_s']:,.0f} tok/s, "
        f"engine {b['engine']}, "
        f"generation {100 * b['gen_share']:.0f}% of the step, {mfu}, peak {b['peak_mem_gb']:.1f} GB"
    )


if __name__ == "__main__":
    main()
