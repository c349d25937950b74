"""One module per training method, chosen here and nowhere else (``get``).

Each method module holds its cross-field validation (``validate``, torch-free: ``resolve`` calls it),
the check that the names it reads are registered (``check_names``, torch-free: ``--check`` calls it),
its data and its trainer, and ``run(res, run_dir, resume) -> exit code`` inside the shared
``training_core.run.lifecycle.RunLifecycle``. GRPO, SFT and DPO share TRL's trainer loop
(``training_core.methods.trl_run``); self-play runs pippa's own (``training_core.selfplay``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from training_core.config import Resolved, RunConfig

# method name (RunConfig.method) -> its module; imported on use, so resolving a recipe stays torch-free
MODULES = {
    "grpo": "training_core.methods.grpo",
    "sft": "training_core.methods.sft",
    "dpo": "training_core.methods.dpo",
    "selfplay": "training_core.methods.selfplay",
}


class Method(Protocol):
    def validate(self, cfg: RunConfig) -> None: ...

    def check_names(self, cfg: RunConfig) -> None: ...

    def run(self, res: Resolved, run_dir: Path, resume: bool = False) -> int: ...


def get(name: str) -> Method:
    """The module of method ``name`` (RunConfig.method's Literal keeps the name valid)."""
    module: Method = importlib.import_module(MODULES[name])  # type: ignore[assignment]
    return module
