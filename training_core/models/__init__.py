"""The model a run trains: what it settles at start (precision, ``model.from_run``) and its loading.

``settle`` returns a new Resolved (the config is frozen) with the precision torch can train in on this
GPU (``bf16`` settled into the mode that keeps every update and fits, training_core.hardware.precision) and
``model.from_run``'s checkpoint as the model name, so the run header shows what runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from training_core.config import Resolved
from training_core.errors import UsageError
from training_core.hardware.platform import PlatformFacts, TorchFacts, torch_facts, train_precision
from training_core.hardware.precision import BF16_WEIGHTS, choose, pure_bf16_warning


def settle(res: Resolved, facts: PlatformFacts, runs_dir: Path, tf: TorchFacts | None = None) -> Resolved:
    """``res`` with the precision that runs here (bf16 becomes fp16 on a GPU without it; ``bf16`` becomes
    bf16_amp or bf16_kahan by the model's size, recorded under ``platform.precision``) and
    ``model.from_run`` turned into that run's newest checkpoint. ``tf``: the installed torch's facts
    (tests inject a GPU's). Imports torch."""
    m = res.config.model
    precision, note = train_precision(m.precision, facts, tf or torch_facts())
    if note:
        print(note, flush=True)
    name = str(run_checkpoint(runs_dir, m.from_run)) if m.from_run else m.name
    if precision == "bf16":
        from training_core import methods

        cfg = res.config
        n_params = count_params(name)
        choice = choose(
            n_params,
            0 if m.lora_r > 0 else n_params,  # LoRA: the adapters' state is small beside the weights
            facts.gpu_memory_gb,
            cfg.launch.strategy if cfg.launch.processes > 1 else "ddp",
            cfg.launch.processes,
            autocast=methods.get(cfg.method).autocast,  # self-play's loop has none
        )
        precision = choice.mode
        print(f"precision: bf16 -> {choice.mode}: {choice.why}", flush=True)
        res = dataclasses.replace(res, platform={**res.platform, "precision": choice.as_dict()})
    warning = pure_bf16_warning(precision, res.config.train.learning_rate)
    if warning:
        print(warning, flush=True)
    if precision == m.precision and name == m.name:
        return res
    return res.with_model(precision=precision, name=name)


def count_params(name: str) -> int:
    """The parameter count of model ``name`` from its config alone (built on the meta device: no weights
    are read or allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(_source(name))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def load_model(name: str, precision: str) -> tuple[Any, Any]:
    """Tokenizer and model, the weights in the dtype the run trains in: bf16 for ``bf16_kahan`` and
    ``bf16_pure``, fp32 for the autocast modes and the CPU (``precision`` is already settled, ``settle``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = _source(name)
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if precision in BF16_WEIGHTS else torch.float32
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model, tokenizer


def _source(name: str) -> str:
    """What ``from_pretrained`` reads for model ``name``: tiny's built directory, a local directory (which
    must exist), or the hub id."""
    from training_core.models import tiny

    if name == "tiny":
        return str(tiny.ensure())
    if _looks_like_path(name):
        if not Path(name).expanduser().exists():
            raise UsageError(f"model path not found: {name}")
        return str(Path(name).expanduser())
    return name


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
