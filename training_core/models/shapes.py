"""Real model shapes with random weights, built in memory: GPU benchmarks without the hub.

``training_core.models.tiny`` builds a toy model for CPU tests; this builds the architecture of a real one
(``QWEN2_0_5B`` = Qwen/Qwen2-0.5B's config.json) so memory and FLOP/s match the real model's while
nothing is downloaded. The tokenizer is tiny's character tokenizer padded with filler tokens to the
model's vocabulary size, so every id a random policy samples decodes to something.
"""

from __future__ import annotations

from typing import Any

# Qwen/Qwen2-0.5B(-Instruct) config.json: 494M parameters, tied embeddings.
QWEN2_0_5B: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


# Qwen/Qwen2.5-1.5B(-Instruct) config.json: 1.54B parameters, tied embeddings.
QWEN2_5_1_5B: dict[str, Any] = {
    **QWEN2_0_5B,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
}

# A small Qwen2 shape (GQA, several layers, a vocabulary past tiny's characters) for the CPU: the tests and
# the dry modes of bench/gpu_perf run the code paths of the real shapes on it in seconds.
QWEN2_TOY: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "vocab_size": 256,
    "tie_word_embeddings": True,
}


def build_tokenizer(vocab_size: int) -> Any:
    """tiny's character tokenizer, its vocabulary padded to ``vocab_size`` with ``<fN>`` tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from training_core.models.tiny import CHARS, SPECIALS

    base = SPECIALS + CHARS
    vocab = {tok: i for i, tok in enumerate(base + [f"<f{i}>" for i in range(vocab_size - len(base))])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_model(spec: dict[str, Any], dtype: Any = None, seed: int = 0, device: str = "cpu") -> Any:
    """A randomly initialised Qwen2 causal LM of shape ``spec`` (pad id 0, eos id 1, as tiny's), its
    weights made and initialised on ``device`` (a GPU builds a 1.5B model in a second; a CPU takes long)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(pad_token_id=0, eos_token_id=1, bos_token_id=1, **spec)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0, bos_token_id=1)
    return model
