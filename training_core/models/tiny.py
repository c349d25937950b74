"""A tiny random-init Qwen2 model and a character-level tokenizer, built in code, no hub needed.

``ensure()`` builds them once into a cache directory with ``save_pretrained`` and returns the path,
so the trainer loads them through the same ``from_pretrained`` path as a real model: the tiny recipe
exercises every code path the GPU recipes use. The directory name carries a hash of the spec, so a
changed spec builds a new model instead of silently reusing an old one; it is written to a temporary
directory and renamed, so a concurrent or killed build never leaves a half-written model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SPECIALS = ["<pad>", "<eos>", "<unk>"]
# Digits and operators first (the tiny task), then enough text for prompts and the answer tags.
CHARS = list("0123456789+-*/=.,?:() \n") + list("abcdefghijklmnopqrstuvwxyz") + list("<>#$%")
# Qwen2 architecture, scaled down: small enough for a training step in ~0.1 s on one CPU core.
SPEC: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "seed": 0,
}


def cache_root() -> Path:
    return Path(os.environ.get("PIPPA_CACHE", Path.home() / ".cache" / "pippa"))


def spec_hash() -> str:
    blob = json.dumps({"spec": SPEC, "chars": CHARS, "specials": SPECIALS, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def ensure(root: Path | None = None) -> Path:
    """The tiny model's directory, building it on first use."""
    target = (root or cache_root()) / f"tiny-qwen2-{spec_hash()}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    try:
        build_tokenizer().save_pretrained(tmp)
        build_model().save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def build_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_model() -> Any:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = dict(SPEC)
    seed = spec.pop("seed")
    config = Qwen2Config(
        vocab_size=len(SPECIALS) + len(CHARS),
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        **spec,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0, bos_token_id=1)
    return model
