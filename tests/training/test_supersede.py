"""--resume moves the lines it will redo out of metrics.jsonl, so every reader sees one row per step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from training_core.run.metrics import supersede


def _write(path: Path, records: list[dict[str, Any]], torn: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + torn)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


HEADER = {"type": "header", "run_id": "r", "resumed_from_step": None}


def test_lines_past_the_checkpoint_and_the_end_line_move_to_the_superseded_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    steps = [{"type": "step", "step": s, "reward/mean": s / 10} for s in range(1, 8)]
    evals = [{"type": "eval", "step": s, "eval/accuracy": 0.5} for s in (0, 5, 6)]
    end = {"type": "end", "status": "interrupted", "step": 7, "error": "signal 15"}
    _write(path, [HEADER, evals[0], *steps[:5], evals[1], *steps[5:], evals[2], end])
    inode = path.stat().st_ino

    assert supersede(path, 5) == 4  # steps 6, 7, the eval at 6, the end line

    kept = _read(path)
    assert [(r["type"], r.get("step")) for r in kept] == [
        ("header", None),
        ("eval", 0),
        *[("step", s) for s in range(1, 6)],
        ("eval", 5),
    ]
    assert _read(tmp_path / "metrics.superseded.jsonl") == [steps[5], steps[6], evals[2], end]
    assert path.stat().st_ino != inode  # replaced, not edited in place: followers can tell
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_second_resume_appends_to_the_superseded_file_and_a_torn_line_moves_too(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    old = tmp_path / "metrics.superseded.jsonl"
    old.write_text('{"type": "step", "step": 9}\n')
    _write(path, [HEADER, {"type": "step", "step": 1}, {"type": "step", "step": 2}], torn='{"type": "st')
    assert supersede(path, 1) == 2
    assert path.read_text().endswith("\n") and [r["step"] for r in _read(path)[1:]] == [1]
    assert old.read_text().splitlines() == [
        '{"type": "step", "step": 9}',
        '{"type": "step", "step": 2}',
        '{"type": "st',
    ]


def test_nothing_to_move_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    _write(path, [HEADER, {"type": "step", "step": 1}, "not a record"])  # type: ignore[list-item]
    inode = path.stat().st_ino
    assert supersede(path, 1) == 0 and path.stat().st_ino == inode
    assert not (tmp_path / "metrics.superseded.jsonl").exists()
    assert supersede(tmp_path / "missing.jsonl", 0) == 0


def test_no_checkpoint_supersedes_every_step_but_keeps_the_headers(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    _write(path, [HEADER, {"type": "eval", "step": 0}, {"type": "step", "step": 1}])
    assert supersede(path, -1) == 2 and _read(path) == [HEADER]
