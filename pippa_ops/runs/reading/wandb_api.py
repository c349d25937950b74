"""A W&B project's runs with their summary metrics, through ``wandb.Api``, next to pippa's own.

Needs ``WANDB_API_KEY`` on this machine (the environment, else the repo's ``.env``, where ``pippa up``
reads the secrets it pushes). The key goes to ``wandb.Api(api_key=...)``, never to argv or output.
``list_runs`` takes the API object as a parameter so that the listing's logic is tested without a
network; anything wandb raises becomes one line.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pippa_ops.errors import PippaError, UsageError, WandbUnavailable

PATH_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
ENABLE = (
    "W&B listing needs WANDB_API_KEY on this machine: export it, or put it in the repo's .env "
    "(see .env.example), then run `pippa runs --wandb ENTITY/PROJECT` again"
)


class Api(Protocol):
    def runs(self, path: str, *, order: str, per_page: int) -> Iterable[Any]: ...


@dataclass(frozen=True)
class WandbRun:
    id: str
    name: str
    state: str
    url: str | None
    created: str | None
    summary: dict[str, Any] = field(default_factory=dict)  # scalar summary metrics, W&B's "_" keys left out
    pippa_run: str | None = None  # the pippa run logging to it (its metrics header names this W&B id)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def api_key(env_file: str | None = None) -> str | None:
    """WANDB_API_KEY from the environment, else from the repo's .env."""
    key = os.environ.get("WANDB_API_KEY")
    if key:
        return key
    from pathlib import Path

    from pippa_ops.provision.envfile import read_env
    from pippa_ops.repo import fallback_root

    return read_env(Path(env_file) if env_file else fallback_root() / ".env").get("WANDB_API_KEY") or None


def real_api(key: str) -> Api:
    try:
        import wandb
    except ImportError as e:
        raise WandbUnavailable(
            "W&B listing needs the wandb package here: pip install 'wandb>=0.31,<0.32'"
        ) from e
    return wandb.Api(api_key=key, timeout=30)  # type: ignore[no-any-return]


def _scalars(summary: Any) -> dict[str, Any]:
    items = summary.items() if hasattr(summary, "items") else []
    out: dict[str, Any] = {}
    for k, v in items:
        if not isinstance(k, str) or k.startswith("_"):
            continue
        if isinstance(v, bool | str) or (isinstance(v, int | float) and math.isfinite(v)):
            out[k] = v
    return out


def list_runs(
    path: str, *, api: Api | None = None, limit: int = 50, pippa_ids: Mapping[str, str] | None = None
) -> list[WandbRun]:
    """The newest ``limit`` runs of ``ENTITY/PROJECT``; ``pippa_ids`` maps W&B ids to pippa run ids."""
    if not PATH_RE.fullmatch(path):
        raise UsageError(f"--wandb {path!r}: give ENTITY/PROJECT")
    if api is None:
        key = api_key()
        if not key:
            raise WandbUnavailable(ENABLE)
        api = real_api(key)
    try:
        runs = list(itertools.islice(api.runs(path, order="-created_at", per_page=min(limit, 100)), limit))
        out = [
            WandbRun(
                id=str(r.id),
                name=str(getattr(r, "name", None) or r.id),
                state=str(getattr(r, "state", "") or ""),
                url=getattr(r, "url", None),
                created=str(getattr(r, "created_at", "") or "") or None,
                summary=_scalars(getattr(r, "summary", {})),
                pippa_run=(pippa_ids or {}).get(str(r.id)),
            )
            for r in runs
        ]
    except PippaError:
        raise
    except Exception as e:  # wandb's own errors (auth, network, no such project): one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise WandbUnavailable(f"W&B: listing {path} failed: {first[:300]}") from e
    return out
