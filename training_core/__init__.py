"""training_core: the GPU-host half of pippa (Dr GRPO on TRL, recipes, rewards, eval, metrics).

It never imports pippa_ops, textual or typer.
"""

__version__ = "0.1.0"
