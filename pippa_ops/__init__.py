"""pippa_ops: the laptop half of pippa (hosts, sync, tmux runs, GPUs, metrics; CLI and TUI on top).

The core modules import no typer, textual or rich; ``pippa_ops.cli`` and ``pippa_ops.dash`` sit on top.
"""

__version__ = "0.1.0"
