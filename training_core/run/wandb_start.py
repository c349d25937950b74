"""W&B for a run: online when asked, offline where a run must not need the network, never a login
prompt; a key W&B refuses fails the start with one line naming where the key came from and how to run
without it (docs/hosts.md, W&B keys)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pippa_contract.rundir import MOVED_TO
from training_core.config import Resolved
from training_core.errors import TrainingError

DEFAULT_ENV = "PIPPA_WANDB_DEFAULT"  # "offline": a key alone does not take the run online (host local)


def wandb_mode(res: Resolved | None = None) -> str | None:
    """``WANDB_MODE`` when set (disabled: off); else online with a key, unless the host's default is
    offline (``local``: the main job needs no network) and the run did not ask for W&B (a
    ``logging.wandb_project`` or ``wandb_entity``); off without a key."""
    asked = os.environ.get("WANDB_MODE")
    if asked == "disabled":
        return None
    if asked in ("offline", "online"):
        return asked
    if not os.environ.get("WANDB_API_KEY"):
        return None
    log = res.config.logging if res is not None else None
    wanted = log is not None and bool(log.wandb_project or log.wandb_entity)
    return "offline" if os.environ.get(DEFAULT_ENV) == "offline" and not wanted else "online"


def key_source() -> str:
    """Where this process's WANDB_API_KEY came from: the host's secrets file, or the environment."""
    from pippa_contract.secrets import SECRETS_PATH, read_secret_values

    value = os.environ.get("WANDB_API_KEY")
    if value and read_secret_values(SECRETS_PATH).get("WANDB_API_KEY") == value:
        return f"{SECRETS_PATH} (pippa up copies it from the project's .env)"
    return "the environment"


def refused_key(detail: str) -> TrainingError:
    return TrainingError(
        f"W&B refused WANDB_API_KEY from {key_source()} ({detail}): fix the key there, or delete the line, "
        "or run offline with WANDB_MODE=offline (the host's env in hosts.toml, or the .env)"
    )


def start_wandb(res: Resolved, run_dir: Path, resume_id: str | None) -> dict[str, Any] | None:
    mode = wandb_mode(res)
    if mode is None:
        return None
    import wandb

    log = res.config.logging
    try:
        run = wandb.init(
            project=log.wandb_project or os.environ.get("WANDB_PROJECT") or "pippa",
            entity=log.wandb_entity or os.environ.get("WANDB_ENTITY") or None,
            name=run_dir.name,
            id=resume_id,
            resume="allow" if resume_id else None,
            mode=mode,  # type: ignore[arg-type]
            config=res.as_dict(),
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
        )
    except Exception as e:
        if type(e).__name__ == "AuthenticationError" or "API key" in str(e):
            text = str(e).strip().splitlines()
            raise refused_key(f"{type(e).__name__}: {text[0] if text else ''}") from e
        raise
    url = None if mode == "offline" else run.url
    return {"id": run.id, "url": url, "mode": mode}


class UnlessMoved:
    """The W&B mirror of a run that may turn out to be a stale copy (runs.moving.stale on the laptop): before
    each record it looks for the run dir's ``moved_to`` mark (one stat), and from the first time it sees
    it logs nothing more, so the W&B run goes on from the live copy on the new host only. The mark is
    written before the stale copy is stopped; while the host is cut off nothing can write it, and the
    copy logs on (docs/leaving-runs-alone.md, "The stale copy and W&B")."""

    def __init__(self, run_dir: Path, mirror: Callable[[int, dict[str, Any]], None]) -> None:
        self.mark = run_dir / MOVED_TO
        self.mirror = mirror
        self.moved = False

    def __call__(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.moved and self.mark.exists():
            self.moved = True
            print(
                f"this copy moved to {self.mark.read_text().strip() or 'another host'}: "
                "it logs nothing more to W&B",
                flush=True,
            )
        if not self.moved:
            self.mirror(step, metrics)
