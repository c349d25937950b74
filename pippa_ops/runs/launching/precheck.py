"""Checks around a launch, so ``pippa run`` never says "started" for a run that cannot run.

Before: the host's training python exists, runs, and imports ``training_core`` from the synced tree
(one agent request, after the sync and before anything is started). After: ``runs.launching.startup`` watches
the start-up.
"""

from __future__ import annotations

import shlex

from pippa_contract import verbs
from pippa_ops.errors import ToolMissing
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client


def python_argv(python: str | None, remote_dir: str) -> list[str]:
    """The training python as an argument list: the host's ``python`` setting, else the venv's."""
    return shlex.split(python) if python else [remote_dir.rstrip("/") + "/.venv/bin/python"]


def up_hint(host: str) -> str:
    return f"run `pippa up {host}` to install it"


def check_python(
    spec: HostSpec, python: str | None, agent: agent_client.Session, *, module: str | None = "training_core"
) -> None:
    """Raise ToolMissing, naming the python and the fix, unless it runs and imports ``module``."""
    argv = python_argv(python, spec.remote_dir)
    answer = verbs.check_python(agent, argv, spec.remote_dir, module)
    if answer.get("ok"):
        return
    shown = " ".join(argv)
    if answer.get("missing"):
        raise ToolMissing(
            f"{spec.name}: the training python {shown} is not there; {up_hint(spec.name)} "
            "(or set python in the host's entry)"
        )
    what = f"cannot import {module}" if module else "does not run"
    line = answer.get("line") or "no output"
    raise ToolMissing(f"{spec.name}: the training python {shown} {what} ({line}); {up_hint(spec.name)}")


def failure_hint(error: str | None, host: str) -> str:
    """What to do about a run's failure line, where pippa knows: a missing module means setup."""
    if error and "ModuleNotFoundError" in error:
        return f"; {up_hint(host)}"
    return ""
