"""A stale copy (a run that moved to another host while this one was cut off) logs nothing more to W&B
once its run dir is marked ``moved_to``, and its offline W&B runs are never synced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pippa_agent.host import AgentError
from pippa_agent.wandb_sync import wandb_sync
from pippa_contract.rundir import MOVED_TO
from training_core.run.metrics import MetricsWriter
from training_core.run.wandb_start import UnlessMoved


def test_the_mirror_logs_nothing_to_wandb_after_the_moved_to_mark(tmp_path: Path, capsys) -> None:
    logged: list[tuple[int, dict[str, Any]]] = []
    writer = MetricsWriter(
        tmp_path / "metrics.jsonl", mirror=UnlessMoved(tmp_path, lambda s, m: logged.append((s, m)))
    )
    writer.step(1, {"reward/mean": 0.5})
    (tmp_path / MOVED_TO).write_text("h100-b\n")
    writer.step(2, {"reward/mean": 0.6})
    writer.eval(2, {"eval/score": 0.1})
    (tmp_path / MOVED_TO).unlink()  # once seen, for good: a removed mark does not start it again
    writer.step(3, {"reward/mean": 0.7})
    writer.close()
    assert logged == [(1, {"reward/mean": 0.5})]
    assert "moved to h100-b: it logs nothing more to W&B" in capsys.readouterr().out


def test_wandb_sync_refuses_a_run_dir_marked_moved(tmp_path: Path) -> None:
    (tmp_path / "wandb" / "offline-run-20260101_000000-abc").mkdir(parents=True)
    (tmp_path / MOVED_TO).write_text("h100-b\n")
    req: Any = {
        "run_dir": str(tmp_path),
        "secrets_path": str(tmp_path / "none"),
        "python": ["python3"],
        "remote_dir": str(tmp_path),
        "env": {"WANDB_API_KEY": "x" * 40},
    }
    with pytest.raises(AgentError, match="moved to h100-b: its W&B run goes on there"):
        wandb_sync(req)
