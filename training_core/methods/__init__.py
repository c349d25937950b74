"""One class per training method, chosen here and nowhere else (``get``).

Every method is a ``base.Method``: its cross-field validation (``validate``, torch-free: ``resolve``
calls it), the check that the names it reads are registered (``check_names``, torch-free: ``--check``
calls it), and ``run(res, run_dir, resume) -> exit code`` inside the shared
``training_core.run.lifecycle.RunLifecycle``. GRPO, SFT and DPO are ``trl_run.TrlMethod``s sharing TRL's
trainer loop (SFT and DPO through ``trl_run.SupervisedMethod``); self-play runs pippa's own
(``training_core.selfplay``).
"""

from __future__ import annotations

import importlib

from training_core.methods.base import Method

# method name (RunConfig.method) -> its module and class; imported on use, so resolving a recipe stays
# torch-free
METHODS = {
    "grpo": ("training_core.methods.grpo", "GrpoMethod"),
    "sft": ("training_core.methods.sft", "SftMethod"),
    "dpo": ("training_core.methods.dpo", "DpoMethod"),
    "selfplay": ("training_core.methods.selfplay", "SelfPlayMethod"),
}


def get(name: str) -> Method:
    """Method ``name`` (RunConfig.method's Literal keeps the name valid)."""
    module, cls = METHODS[name]
    method: Method = getattr(importlib.import_module(module), cls)()
    return method
