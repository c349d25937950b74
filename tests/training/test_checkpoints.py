"""A checkpoint the trainer finished in ``checkpoints/.staging`` is published with one rename, the
older ones beyond ``keep`` removed; a half-written one is never listed."""

from __future__ import annotations

from pathlib import Path

from pippa_agent.supervise.budget import save_time
from training_core.methods.trainer import publish, record_save
from training_core.run.layout import SAVES, STAGING, checkpoints, newest_checkpoint


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


def test_the_saves_the_trainer_timed_are_summed_per_attempt_by_the_supervisor(tmp_path: Path) -> None:
    record_save(tmp_path, 10, 100.0, 104.0)  # in the first attempt
    record_save(tmp_path, 20, 200.0, 203.5)  # in the second
    record_save(tmp_path, 30, 298.0, 301.0)  # began before the second attempt's end... ended after it
    with (tmp_path / SAVES).open("a") as f:
        f.write('{"step": 40, "start": 2')  # torn: the trainer killed while writing the line
    saves = str(tmp_path / SAVES)
    assert save_time(saves, 0.0, 150.0) == {"save_s": 4.0}
    assert save_time(saves, 150.0, 300.0) == {"save_s": 3.5}
    assert save_time(saves, 300.0, 400.0) == {"save_s": 1.0}, "only the part inside the attempt"
    assert save_time(saves, 500.0, 600.0) == {} and save_time(str(tmp_path / "none"), 0, 1) == {}
