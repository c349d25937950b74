"""A recipe plugin for the multi-process tests: at the end of training every rank writes what it saw
(world size, its rank, its local share of the weights, the full weights) to ``probe-rank<R>.pt`` in the
run directory. Under ZeRO-3 the full weights are gathered from the shards (a collective: every rank
takes part); the local share is then the size of this rank's own shard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training_core.methods.callbacks import CALLBACKS, CallbackContext


@CALLBACKS.register("dist_probe")
def dist_probe(ctx: CallbackContext) -> Any:
    import torch
    import torch.distributed as dist
    from transformers import TrainerCallback

    class Probe(TrainerCallback):  # type: ignore[misc]
        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            on = dist.is_available() and dist.is_initialized()
            rank, world = (dist.get_rank(), dist.get_world_size()) if on else (0, 1)
            params = list(model.parameters())
            sharded = all(hasattr(p, "ds_tensor") for p in params)
            local = sum((p.ds_tensor.numel() if sharded else p.numel()) for p in params)
            if sharded:
                import deepspeed

                with deepspeed.zero.GatheredParameters(params):
                    full = {n: p.detach().clone() for n, p in model.named_parameters()}
            else:
                full = {n: p.detach().clone() for n, p in model.named_parameters()}
            torch.save(
                {"rank": rank, "world": world, "sharded": sharded, "local_numel": local, "params": full},
                Path(ctx.run_dir) / f"probe-rank{rank}.pt",
            )

    return Probe()
