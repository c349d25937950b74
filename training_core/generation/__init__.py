"""How GRPO generates completions: the engines (``engines``), the trainer mixin that runs them with a
one-line fallback and times them (``choice``), and vLLM server mode's server on GPUs of its own
(``vllm_server``). docs/training.md, "Generation engines"."""
