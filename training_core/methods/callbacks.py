"""Extra trainer callbacks by name, so recipes can add them (``[[callbacks]] name = "..."``).

Extension point: ``@CALLBACKS.register("name")`` on ``factory(ctx: CallbackContext, **params) ->
transformers.TrainerCallback``. The context carries the run's objects (tokenizer, metrics writer,
run dir, resolved config); write eval-like results with ``ctx.writer.eval(step, {...})`` so they land in
metrics.jsonl as ``eval`` lines (e.g. ``mbpp_eval/pass_rate``), and log to W&B when ``wandb.run`` is
set. Keep the interval in the factory's own parameters (an earlier MBPP callback popped it from a
shared dict and never fired). Provider modules: ``CALLBACKS.modules`` (``training_core.code`` is
imported when present) or the recipe's ``plugins``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training_core.plugin_registry import Registry

CALLBACKS: Registry[Any] = Registry("callback", ["training_core.code"])


@dataclass
class CallbackContext:
    tokenizer: Any
    writer: Any  # training_core.run.metrics.MetricsWriter
    run_dir: str
    config: Any  # the resolved RunConfig
    extra: dict[str, Any] = field(default_factory=dict)
