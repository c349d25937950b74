"""Which bf16 mode a run trains in: the one that keeps every small update and fits the GPUs.

bf16 keeps 8 significant bits, so an AdamW step (about ``lr`` per element) smaller than half the spacing
of a weight rounds back to that weight: at lr 5e-6, bf16-resident weights of a Qwen2 shape barely move
and RMSNorm weights (near 1.0, spacing 0.0078) never do (docs/training.md, "Precision"). ``model.precision
= "bf16"`` (what ``auto`` becomes on a bf16 GPU) therefore means bf16 *compute* with an exact update, and
``choose`` settles it at start, from the parameter count and the GPUs' memory, into one of:

- ``bf16_amp``: fp32 master weights under bf16 autocast (16 bytes per parameter with AdamW), when they
  fit; with ZeRO sharding (launch.strategy zero2/zero3) DeepSpeed keeps the fp32 master copy, sharded.
- ``bf16_kahan``: bf16 weights with Kahan-compensated AdamW (torch-optimi; 10 bytes per parameter), when
  fp32 master weights do not fit one GPU.

``bf16_pure`` (bf16 weights, plain AdamW: today's loss of small updates) stays, by name, with a one-line
warning at learning rates too small for bf16 weights to move. Torch-free: the laptop's ``--dry-run`` and
the recipe checks import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Modes that compute in bf16; "bf16" is settled into bf16_amp or bf16_kahan by ``choose``.
BF16_MODES = ("bf16", "bf16_amp", "bf16_kahan", "bf16_pure")
# Modes whose weights are stored in bf16 (load_model's dtype); the others keep fp32 weights.
BF16_WEIGHTS = ("bf16_kahan", "bf16_pure")

# Bytes per trained parameter with AdamW: weights + grads + two moments (+ the Kahan compensation).
# bf16_amp/fp32: 4 + 4 + 4 + 4; bf16_kahan: 2 + 2 + 2 + 2 + 2 (optimi keeps its state in the weights'
# dtype); bf16_pure: 2 + 2 + 2 + 2 (torch AdamW's state follows the weights' dtype).
BYTES_PER_PARAM = {"fp32": 16, "fp16": 16, "bf16_amp": 16, "bf16_kahan": 10, "bf16_pure": 8}
# Share of a GPU's memory the training state may take: the rest is activations, logits and generation.
STATE_SHARE = 0.5
# bf16 keeps 8 significant bits: a value in [1, 2) is spaced 2**-7 apart and an update under half of
# that (2**-8 relative) rounds back. RMSNorm weights start at 1.0.
BF16_HALF_SPACING = 2.0**-8


@dataclass(frozen=True)
class Choice:
    mode: str  # the settled model.precision
    why: str  # one line for the run's log
    need_gb: float  # training state per GPU in this mode (weights, grads, AdamW state)
    gpu_gb: float  # memory of one GPU (0 = unknown)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "why": self.why, "need_gb": round(self.need_gb, 2), "gpu_gb": self.gpu_gb}


def state_gb(mode: str, n_params: int, n_trainable: int, strategy: str = "ddp", processes: int = 1) -> float:
    """Training state per GPU in GB: frozen weights at their dtype, trained ones at BYTES_PER_PARAM,
    ZeRO-2 sharding the fp32 master copy and AdamW state, ZeRO-3 everything, across ``processes``."""
    weight_bytes = 2 if mode in BF16_WEIGHTS else 4
    frozen = (n_params - n_trainable) * weight_bytes
    trained = n_trainable * BYTES_PER_PARAM[mode]
    n = max(1, processes)
    if strategy == "zero3":
        total = (frozen + trained) / n
    elif strategy == "zero2":  # bf16 weights and grads per rank; fp32 master weights + AdamW sharded
        total = frozen + n_trainable * 4 + n_trainable * 12 / n
    else:
        total = frozen + trained
    return total / 1e9


def choose(
    n_params: int,
    n_trainable: int,
    gpu_gb: float,
    strategy: str = "ddp",
    processes: int = 1,
    autocast: bool = True,
) -> Choice:
    """Settle ``bf16``: fp32 master weights (``bf16_amp``) when their state fits ``STATE_SHARE`` of one
    GPU or ZeRO shards it, else Kahan-compensated bf16 AdamW. ``autocast=False`` for a trainer that
    has no autocast (self-play's own loop): bf16_kahan there."""
    amp_gb = state_gb("bf16_amp", n_params, n_trainable, strategy, processes)
    kahan_gb = state_gb("bf16_kahan", n_params, n_trainable, strategy, processes)
    size = f"{n_trainable / 1e6:,.0f}M trained params"
    if not autocast:
        why = "this trainer has no autocast: bf16 weights with Kahan-compensated AdamW"
        return Choice("bf16_kahan", f"{why} ({size}, {kahan_gb:.1f} GB)", kahan_gb, gpu_gb)
    if strategy in ("zero2", "zero3"):
        why = f"fp32 master weights, sharded by {strategy} over {processes} GPUs, bf16 autocast"
        return Choice("bf16_amp", f"{why} ({size}, {amp_gb:.1f} GB per GPU)", amp_gb, gpu_gb)
    if gpu_gb <= 0 or amp_gb <= STATE_SHARE * gpu_gb:
        of = f" of {gpu_gb:.0f} GB" if gpu_gb > 0 else ""
        why = f"fp32 master weights under bf16 autocast ({size}: {amp_gb:.2g} GB{of})"
        return Choice("bf16_amp", why, amp_gb, gpu_gb)
    why = (
        f"fp32 master weights would need {amp_gb:.1f} GB of {gpu_gb:.0f} GB ({size}): bf16 weights with "
        f"Kahan-compensated AdamW ({kahan_gb:.1f} GB); launch.strategy zero2/zero3 over several GPUs "
        "keeps fp32 master weights"
    )
    return Choice("bf16_kahan", why, kahan_gb, gpu_gb)


def pure_bf16_warning(mode: str, learning_rate: float) -> str | None:
    """One line when bf16-resident weights under plain AdamW cannot keep this learning rate's steps."""
    if mode != "bf16_pure" or learning_rate >= BF16_HALF_SPACING:
        return None
    return (
        f"warning: model.precision bf16_pure at lr {learning_rate:g}: an AdamW step rounds away on every "
        f"weight above {learning_rate / BF16_HALF_SPACING:.2g} in magnitude (RMSNorm weights near 1.0 never "
        'move); model.precision = "bf16" keeps every update'
    )
