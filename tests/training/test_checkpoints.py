"""A checkpoint the trainer finished in ``checkpoints/.staging`` is published with one rename, the
older ones beyond ``keep`` removed; a half-written one is never listed."""

from __future__ import annotations

from pathlib import Path

from training_core.methods.trainer import publish
from training_core.run.layout import STAGING, checkpoints, newest_checkpoint


def test_publish_renames_the_finished_checkpoint_into_place_and_keeps_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        (root / f"checkpoint-{step}").mkdir(parents=True)
    staging = root / STAGING
    (staging / "checkpoint-3").mkdir(parents=True)
    (staging / "checkpoint-3" / "model.safetensors").write_text("w")
    (staging / "README.md").write_text("card")
    publish(staging, 3, keep=2)
    assert [s for s, _ in checkpoints(root)] == [2, 3]
    assert (root / "checkpoint-3" / "model.safetensors").read_text() == "w"
    assert (root / "README.md").read_text() == "card"
    assert not staging.exists()


def test_a_checkpoint_still_in_staging_is_not_a_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    (root / "checkpoint-4").mkdir(parents=True)
    (root / STAGING / "checkpoint-8").mkdir(parents=True)  # a save killed half-way
    assert newest_checkpoint(root) == root / "checkpoint-4"
