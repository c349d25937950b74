"""How GRPO generates completions: the engines (``engines``) and the trainer mixin that runs them with a
one-line fallback and times them (``choice``). docs/training.md, "Generation engines"."""
