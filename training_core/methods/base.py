"""What every training method is to the rest of training_core: an object with its cross-field
validation, its name check and its run. ``training_core.methods.get`` hands one out by name.

Torch-free: ``resolve`` validates a recipe and ``--check`` looks its names up without torch; a method
imports its trainer inside ``run``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from training_core.config import Resolved, RunConfig


class Method(ABC):
    # Whether the method trains under autocast: "bf16" settles into fp32 master weights under bf16
    # autocast only then (training_core.hardware.precision.choose); pippa's own loops run none.
    autocast: ClassVar[bool] = True

    @abstractmethod
    def validate(self, cfg: RunConfig) -> None:
        """Cross-field checks, torch-free (``resolve`` calls it): BadSetting with one line."""

    @abstractmethod
    def check_names(self, cfg: RunConfig) -> None:
        """The names the config reads are registered, torch-free (``--check`` calls it)."""

    @abstractmethod
    def run(self, res: Resolved, run_dir: Path, resume: bool = False) -> int:
        """Train one run inside ``training_core.run.lifecycle.RunLifecycle``; the exit code."""
