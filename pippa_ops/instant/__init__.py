"""Instant commands: a warm process with the CLI imported forks a child per hot command.

``client`` (standard library only) is what ``pippa ps`` imports when the warm process runs;
``server`` is the warm process. Nothing here parses a verb's options or renders its output: the
child runs the same typer app, on the same terminal, as a cold command does.
"""
