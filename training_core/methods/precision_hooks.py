"""What a TRL trainer adds for the settled precision (training_core.hardware.precision): bf16 generation that
leaves fp32 master weights bitwise alone, and the Kahan-compensated AdamW of ``bf16_kahan``.

TRL 1.16's HF-generate path has no autocast, so fp32 master weights (``bf16_amp``) would generate in fp32;
its continuous-batching path calls ``model.to(torch.bfloat16)`` when ``args.bf16``, which turns the master
weights into bf16 for good. ``bf16_generation`` runs generation under bf16 autocast and afterwards puts
back every fp32 tensor a cast replaced (the same tensors: nothing is copied, the optimizer's state stays
keyed to the same parameters). ``PrecisionHooks._generate_single_turn`` is TRL's private generation step
(TRL is pinned to 1.16.x; tests/training/test_precision.py checks it); vLLM generation (TRL's
``sync_weights``) loads the master weights into its own bf16 copy and is untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def bf16_generation(model: Any, enabled: bool = True) -> Iterator[None]:
    """Generate in bf16: autocast, and every fp32 parameter or buffer that a cast inside (TRL's
    ``model.to(torch.bfloat16)``) turned into bf16 restored to its own fp32 tensor on the way out."""
    if not enabled:
        yield
        return
    params = [(p, p.data) for p in model.parameters() if p.dtype == torch.float32]
    buffers = [
        (m, name, b)
        for m in model.modules()
        for name, b in m._buffers.items()
        if b is not None and b.dtype == torch.float32
    ]
    device = next(model.parameters()).device.type
    try:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            yield
    finally:
        for p, data in params:
            if p.dtype != torch.float32:
                p.data = data
        for m, name, b in buffers:
            if m._buffers.get(name) is not b:
                m._buffers[name] = b


def has_master_weights(model: Any, bf16: bool) -> bool:
    """fp32 trained weights under bf16 compute: the ``bf16_amp`` layout (not DeepSpeed's bf16 weights)."""
    return bf16 and any(p.requires_grad and p.dtype == torch.float32 for p in model.parameters())


def kahan_adamw(args: Any) -> tuple[Any, dict[str, Any]]:
    """torch-optimi's AdamW with Kahan summation, from the trainer's AdamW settings: the rounding of each
    bf16 step is carried to the next, so small updates accumulate instead of vanishing (Zamirai et al.
    2020, "Revisiting BFloat16 Training"). The update is AdamW's (decoupled weight decay, lr-scaled)."""
    from optimi import AdamW

    kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    return AdamW, {**kwargs, "kahan_sum": True}


def adamw(params: Any, precision: str, lr: float, weight_decay: float) -> Any:
    """The AdamW of a loop of our own (self-play): Kahan-compensated for ``bf16_kahan``, torch's else."""
    if precision == "bf16_kahan":
        from optimi import AdamW

        return AdamW(params, lr=lr, weight_decay=weight_decay, kahan_sum=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class PrecisionHooks:
    """Mixin for a TRL trainer: ``precision`` (the settled model.precision) picks the optimizer of
    ``bf16_kahan``; generation runs in bf16 over fp32 master weights."""

    def __init__(self, *args: Any, precision: str = "", **kwargs: Any) -> None:
        self.precision = precision
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]

    def create_optimizer(self, model: Any = None) -> Any:
        if self.precision == "bf16_kahan" and getattr(self, "optimizer", None) is None:
            self.optimizer_cls_and_kwargs = kahan_adamw(self.args)  # type: ignore[attr-defined]
        return super().create_optimizer(model)  # type: ignore[misc]

    def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
        model = self.model  # type: ignore[attr-defined]
        with bf16_generation(model, has_master_weights(model, self.args.bf16)):  # type: ignore[attr-defined]
            return super()._generate_single_turn(*args, **kwargs)  # type: ignore[misc]
