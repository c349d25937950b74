"""Every method name maps to one method object (``training_core.methods.get``), built on the base its
trainer loop needs, and choosing one stays torch-free (a recipe resolves and validates without torch)."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

from training_core import config, methods
from training_core.methods.base import Method
from training_core.methods.trl_run import SupervisedMethod, TrlMethod

REPO = Path(__file__).resolve().parents[2]


def test_each_method_name_gives_an_object_on_the_base_of_its_loop() -> None:
    names = typing.get_args(config.Method)
    assert sorted(names) == sorted(methods.METHODS)
    got = {name: methods.get(name) for name in names}
    assert all(isinstance(m, Method) for m in got.values())
    # GRPO trains in TRL's loop and writes its own batch; SFT and DPO share the supervised base
    assert isinstance(got["grpo"], TrlMethod) and not isinstance(got["grpo"], SupervisedMethod)
    assert got["grpo"].generates
    assert all(isinstance(got[n], SupervisedMethod) and not got[n].generates for n in ("sft", "dpo"))
    # self-play runs pippa's own loop: no TRL run, and no autocast (bf16 settles into Kahan weights)
    assert not isinstance(got["selfplay"], TrlMethod)
    assert [n for n in names if not got[n].autocast] == ["selfplay"]


def test_choosing_and_validating_every_method_imports_no_torch_or_trl() -> None:
    code = (
        "import sys, typing\nfrom training_core import config, methods\n"
        "from training_core.hardware.platform import PlatformFacts\n"
        "from training_core.recipes import resolve\n"
        "for name in typing.get_args(config.Method):\n"
        "    m = methods.get(name)\n"
        "resolve('sft_tiny', [], PlatformFacts()); resolve('dpo_tiny', [], PlatformFacts())\n"
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.strip() == "[]"
