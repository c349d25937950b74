"""The model a run trains: what it settles at start (precision, ``model.from_run``) and its loading.

``settle`` returns a new Resolved (the config is frozen) with the precision torch can train in on this
GPU and ``model.from_run``'s checkpoint as the model name, so the run header shows what runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training_core.config import Resolved
from training_core.errors import UsageError
from training_core.platform import PlatformFacts, torch_facts, train_precision


def settle(res: Resolved, facts: PlatformFacts, runs_dir: Path) -> Resolved:
    """``res`` with the precision that runs here (bf16 becomes fp16 on a GPU without it) and
    ``model.from_run`` turned into that run's newest checkpoint. Imports torch."""
    m = res.config.model
    precision, note = train_precision(m.precision, facts, torch_facts())
    if note:
        print(note, flush=True)
    name = str(run_checkpoint(runs_dir, m.from_run)) if m.from_run else m.name
    if precision == m.precision and name == m.name:
        return res
    return res.with_model(precision=precision, name=name)


def load_model(name: str, precision: str) -> tuple[Any, Any]:
    """Tokenizer and model, the weights in the dtype the run trains in: bf16 for ``bf16``, fp32 for the
    autocast modes and the CPU (``precision`` is already settled, ``settle``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.models import tiny

    if name != "tiny" and _looks_like_path(name) and not Path(name).expanduser().exists():
        raise UsageError(f"model path not found: {name}")
    if name == "tiny":
        name = str(tiny.ensure())
    elif _looks_like_path(name):
        name = str(Path(name).expanduser())
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model, tokenizer


def run_checkpoint(runs_dir: Path, run_id: str) -> Path:
    """The newest checkpoint of run ``run_id`` beside this run (``model.from_run``): SFT, then GRPO."""
    from training_core.run.layout import checkpoints_dir, newest_checkpoint

    ckpt = newest_checkpoint(checkpoints_dir(runs_dir / run_id))
    if ckpt is None:
        where = runs_dir / run_id
        raise UsageError(
            f"model.from_run: no checkpoint in {checkpoints_dir(where)}"
            if where.is_dir()
            else f"model.from_run: no run {run_id} in {runs_dir}"
        )
    return ckpt


def _looks_like_path(name: str) -> bool:
    """A local directory rather than a hub id ("org/name" has exactly one slash and no leading dot)."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or Path(name).exists()
