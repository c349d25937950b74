"""The Typer CLI: ``app`` assembles the command groups, each of which lives in its own module."""
