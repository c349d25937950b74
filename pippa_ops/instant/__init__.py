"""Instant commands: a warm process with the CLI imported forks a child per hot command.

``client`` (standard library only) is what ``pippa ps`` imports when the warm process runs;
``server`` is the warm process. Nothing here parses a verb's options or renders its output: the
child runs the same typer app, on the same terminal, as a cold command does.
"""

from __future__ import annotations

# The verbs a warm process serves: the ones people type all day (sync's progress line is drawn on the
# client's terminal by the child, as any output), and doctor (a quick look before each run). Others
# (attach, ssh and forward need a controlling terminal or hold one; dash; ...) always run in the
# command's own process.
HOT = frozenset({"ps", "logs", "gpus", "run", "stop", "wait", "sync", "doctor"})


def hot_verb(argv: list[str]) -> str | None:
    """The hot verb ``argv`` runs (only ``--debug`` may stand before it), else None."""
    i = 0
    while i < len(argv) and argv[i] == "--debug":
        i += 1
    return argv[i] if i < len(argv) and argv[i] in HOT else None
