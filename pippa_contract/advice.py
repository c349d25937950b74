"""What to do after a recipe run failed before its first step: fix the cause, then run it again. A
resume cannot help such a run (it restarts from step 0 and meets the same cause), so neither
``pippa why``'s ``next:`` nor an alert's ``look:`` offers one. Both sides use these rules: the laptop
(``pippa_ops.runs.reading.why``) and the host's alerts (``pippa_agent.alerts``)."""

from __future__ import annotations

import re
import shlex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# (words of the reason, what to fix), the first that fits wins
_CAUSES = (
    (
        ("CPU-only build", "not compiled with CUDA", "no CUDA GPUs", "NVIDIA driver"),
        "the host's torch build: install a CUDA build of torch (the host's setup; pippa up HOST runs it)",
    ),
    (
        ("WANDB_API_KEY", "wandb", "W&B"),
        "the W&B key: fix WANDB_API_KEY where it came from, or set WANDB_MODE=offline (docs/hosts.md)",
    ),
    (
        ("401", "403", "Invalid user token", "Unauthorized", "gated repo", "HF_TOKEN"),
        "the Hub key: fix HF_TOKEN in .env, then pippa up HOST pushes it",
    ),
    (
        (
            "huggingface.co",
            "LocalEntryNotFoundError",
            "OfflineModeIsEnabled",
            "offline mode",
            "HF_HUB_OFFLINE",
            "ConnectionError",
            "Temporary failure in name resolution",
            "Max retries exceeded",
        ),
        "network or Hub cache: give the host access to huggingface.co, or put the model and data in its "
        "HF_HOME cache",
    ),
    (("ModuleNotFoundError", "ImportError"), "the host's packages: pippa up HOST runs its setup"),
)


def started_training(end: Any, steps: Any) -> bool:
    """Whether a run ended after its first step: its end line says it failed at start-up
    (``at_start``), or no step line was ever read (the tail holds the last ones)."""
    if isinstance(end, dict) and end.get("at_start") is True:
        return False
    return bool(steps)


def cause(reason: str | None) -> str:
    """What to fix for a start-up failure with this reason line."""
    text = reason or ""
    for words, fix in _CAUSES:
        if any(w in text for w in words):
            return fix
    return "the cause in its log"


def rerun(recipe: str, command: str, host: str) -> str:
    """``pippa run RECIPE --host H --set k=v ...``: the run again, with the settings it had."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
    return shlex.join(["pippa", "run", recipe, "--host", host, *(a for s in sets for a in ("--set", s))])


def after_disk_full(reason: str | None, run_id: str, host: str) -> str:
    """What to free and how to go on after a run that ended ``disk-full``, from its reason line (the
    path it was writing and the free space there, ``pippa_contract.diskspace.line``): not "fix the
    cause" and a fresh run, which a start-up failure gets, since a resume goes on once there is room."""
    text = reason or ""
    free = re.search(r"\(([^()]* free on [^()]*|free space unknown on [^()]*)\)", text)
    path = re.search(
        r"writing (\S+?):? |No space left on device: '([^']+)'|Disk quota exceeded: '([^']+)'", text
    )
    where = free.group(1) if free else f"the run directory's disk on {host}"
    wrote = next((g for g in path.groups() if g), None) if path else None
    what = f"free space on {host} ({where}" + (f"; it was writing {wrote}" if wrote else "") + ")"
    return (
        f"{what}: ended runs (pippa prune --older-than 7d --host {host}, pippa rm RUN), fewer checkpoints "
        f"(checkpoint.keep); then pippa resume {run_id} --host {host}"
    )


def after_failed_start(reason: str | None, recipe: str, command: str, host: str) -> str:
    """``fix the cause (...), then pippa run ...``: the next step for a failed start."""
    return f"fix {cause(reason)}; then {rerun(recipe, command, host)}"
