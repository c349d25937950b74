"""Every run pippa knows: on the hosts (one agent round trip each) and pulled to this machine.

``pippa runs`` shows what a team compares runs by: recipe, state, steps, final and best reward,
the final eval metrics, duration, commit and the W&B link. The host's agent summarizes each
``metrics.jsonl`` where it lies (``pippa_contract.runfacts``); a pulled copy is summarized here by the
same function, so both read the file the same way. Which host holds a named run is ``runs.moving.locate``.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pippa_contract import rundir as rd
from pippa_contract import states, verbs
from pippa_contract.runfacts import run_facts
from pippa_ops.errors import PippaError, UsageError
from pippa_ops.fanout import fan_out
from pippa_ops.hosts.connect import connect
from pippa_ops.runs.moving.locate import all_hosts
from pippa_ops.runs.records.cost import priced_on
from pippa_ops.runs.records.listing import HostRuns, RunRecord, host_runs
from pippa_ops.transport import agent_client
from pippa_ops.transport.shell import NAME_RE

SORT_KEYS = ("started", "reward", "best", "steps", "duration")


@dataclass(frozen=True)
class RunInfo:
    """A run as ``pippa runs`` lists it: the host's record plus what its metrics file says."""

    record: RunRecord
    steps: int | None = None
    final_reward: float | None = None
    best_reward: float | None = None
    best_step: int | None = None
    eval: dict[str, Any] | None = None  # the last eval line's metrics (its step included)
    wandb: dict[str, Any] | None = None  # {"id", "url", "mode"} from the metrics header
    pulled: str | None = None  # the local copy (pippa pull), if any

    @property
    def host(self) -> str:
        return self.record.host

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def to_json(self) -> dict[str, Any]:
        return {
            **self.record.to_json(),
            "steps": self.steps,
            "final_reward": self.final_reward,
            "best_reward": self.best_reward,
            "best_step": self.best_step,
            "eval": self.eval,
            "wandb": self.wandb,
            "pulled": self.pulled,
        }


def _info(record: RunRecord, summary: Any, pulled: str | None = None) -> RunInfo:
    s = summary if isinstance(summary, dict) else {}
    return RunInfo(
        record=record,
        steps=s.get("last_step"),
        final_reward=s.get("final_reward"),
        best_reward=s.get("best_reward"),
        best_step=s.get("best_step"),
        eval=s.get("eval"),
        wandb=s.get("wandb"),
        pulled=pulled,
    )


def infos_from_answer(host: str, answer: Mapping[str, Any], runs: HostRuns | None = None) -> list[RunInfo]:
    """The agent's ``list_runs`` answer (with ``summary``) as RunInfos (pure); ``runs``: its records
    already derived (and priced)."""
    summaries = {r.get("run_id"): r.get("summary") for r in answer.get("runs") or [] if isinstance(r, dict)}
    return [_info(rec, summaries.get(rec.run_id)) for rec in (runs or host_runs(host, answer)).runs]


def host_infos(host: str) -> list[RunInfo]:
    spec, transport = connect(host)
    with transport:
        answer = verbs.list_runs(agent_client.Once(transport), spec.remote_dir, summary=True)
        runs = priced_on(spec, transport, host_runs(spec.name, answer))
    return infos_from_answer(spec.name, answer, runs)


def pulled_infos(root: Path) -> list[RunInfo]:
    """Runs pulled under ``root/<host>/<run-id>/``. Their state is what the copy says: a run that had
    not ended when it was pulled shows as ``pulled`` (the copy cannot know more)."""
    out: list[RunInfo] = []
    if not root.is_dir():
        return out
    for host_dir in sorted(root.iterdir()):
        if not host_dir.is_dir() or (host_dir / rd.RUN_JSON).exists():
            continue  # a run directory of the host `local` (remote_dir is this repo), not a host's folder
        facts = []
        for run_dir in sorted(host_dir.iterdir()):
            if NAME_RE.fullmatch(run_dir.name) and run_dir.is_dir():
                f = run_facts(str(run_dir), summary=True)
                if f is not None:
                    facts.append(f)
        answer = {"now": time.time(), "sessions": "", "runs": facts}
        for info in infos_from_answer(host_dir.name, answer):
            rec = info.record
            if rec.state == states.LOST:  # no exit code in the copy and no session to ask
                rec = replace(rec, state="pulled", duration_s=None)
            out.append(replace(info, record=rec, pulled=str(host_dir / rec.run_id)))
    return out


def overview(
    hosts: Sequence[str] | None, root: Path, *, pulled_only: bool = False
) -> tuple[list[RunInfo], dict[str, PippaError]]:
    """Runs of ``hosts`` (default: every host), in parallel, and the pulled ones; a run listed by its
    host and pulled too is one entry (the host's, with the copy's path). Host errors come back."""
    pulled = pulled_infos(root)
    if pulled_only:
        if hosts:
            pulled = [p for p in pulled if p.host in hosts]
        return pulled, {}
    results = fan_out(list(hosts or all_hosts()), host_infos)
    errors = {h: r for h, r in results.items() if isinstance(r, PippaError)}
    listed: dict[tuple[str, str], RunInfo] = {}
    for r in results.values():
        if not isinstance(r, PippaError):
            listed.update({(i.host, i.run_id): i for i in r})
    copies = {(p.host, p.run_id): p for p in pulled}
    for key, info in listed.items():
        if key in copies:
            listed[key] = replace(info, pulled=copies.pop(key).pulled)
    if hosts:  # named hosts: only their copies
        copies = {k: v for k, v in copies.items() if k[0] in hosts}
    return [*listed.values(), *copies.values()], errors


def parse_since(text: str, now: float | None = None) -> float:
    """``30m``, ``12h``, ``2d``, ``1w`` ago, or a date ``YYYY-MM-DD[ HH:MM]`` (local time): unix s."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return now - float(m.group(1)) * unit
    for fmt in ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"):
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    raise UsageError(f"--since {text!r}: give an age (30m, 12h, 2d, 1w) or a date (2026-11-20[ 14:00])")


def select(
    infos: Sequence[RunInfo],
    *,
    recipe: str | None = None,
    since: float | None = None,
    state: str | None = None,
    sort: str = "started",
) -> list[RunInfo]:
    """Filter (recipe or command glob, started since, state) and sort; the best first for metrics,
    the newest last for ``started`` (as ``ps`` lists)."""
    if sort not in SORT_KEYS:
        raise UsageError(f"--sort {sort!r}: one of {', '.join(SORT_KEYS)}")
    out = [
        i
        for i in infos
        if (recipe is None or fnmatch.fnmatchcase(i.record.label, recipe))
        and (since is None or (i.record.started or 0.0) >= since)
        and (state is None or i.record.state == state)
    ]
    keys: dict[str, Callable[[RunInfo], float]] = {
        "started": lambda i: i.record.started or 0.0,
        "reward": lambda i: i.final_reward if i.final_reward is not None else float("-inf"),
        "best": lambda i: i.best_reward if i.best_reward is not None else float("-inf"),
        "steps": lambda i: float(i.steps) if i.steps is not None else -1.0,
        "duration": lambda i: i.record.duration_s or 0.0,
    }
    return sorted(out, key=lambda i: (keys[sort](i), i.run_id), reverse=sort != "started")
