"""A checkpoint the trainer finished in ``checkpoints/.staging`` is published with one rename, the
older ones beyond ``keep`` removed; a half-written one is never listed; a torn one (its files do not
match its manifest, or, from before manifests, their own structure) is never resumed from."""

from __future__ import annotations

from pathlib import Path

import pytest

from pippa_agent.supervise.budget import save_time
from pippa_contract.checkpoint_check import MANIFEST, pick, torn, write_manifest
from training_core.methods.trainer import Manifests, publish, record_save
from training_core.run.layout import SAVES, STAGING, checkpoints, newest_checkpoint, resume_checkpoint


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


def _checkpoint(root: Path, step: int, manifest: bool = True) -> Path:
    """A checkpoint as TRL writes it (safetensors weights, torch-saved optimizer and RNG, JSON state),
    published and given its manifest as the trainer does, or, for one from before manifests (or killed
    before its manifest), placed there by hand."""
    import json

    import torch
    from safetensors.torch import save_file

    d = root / STAGING / f"checkpoint-{step}"
    d.mkdir(parents=True)
    save_file({"w": torch.full((64, 64), float(step)), "b": torch.zeros(64)}, str(d / "model.safetensors"))
    torch.save({"state": {0: torch.ones(64, 64)}}, d / "optimizer.pt")
    torch.save({"python": list(range(100))}, d / "rng_state.pth")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": [1] * 50}))
    if manifest:  # as the trainer does: published, then its manifest from the Manifests thread
        manifests = Manifests()
        manifests.submit(publish(root / STAGING, step, keep=5))
        manifests.close()
    else:
        d.rename(root / f"checkpoint-{step}")
    return root / f"checkpoint-{step}"


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


FILES = ("model.safetensors", "optimizer.pt", "rng_state.pth", "trainer_state.json")


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "before-manifests"])
def test_a_checkpoint_torn_in_any_file_is_skipped_with_one_line_and_the_previous_whole_one_used(
    tmp_path: Path, manifest: bool
) -> None:
    for name in FILES:
        root = tmp_path / name / "checkpoints"
        _checkpoint(root, 6, manifest)
        newest = _checkpoint(root, 7, manifest)
        _cut(newest / name)
        step, skipped = pick(str(root))
        assert step == 6, name
        assert len(skipped) == 1 and skipped[0].startswith(f"checkpoint-7 skipped: {name} "), skipped
        assert "\n" not in skipped[0]
        # set aside: nothing else (the supervisor's record, a move, rotation) lists it again, nothing lost
        assert [s for s, _ in checkpoints(root)] == [6] and (root / "checkpoint-7.torn" / name).exists()
        assert pick(str(root)) == (6, skipped)  # set aside earlier (the agent's quick check): still told
        assert resume_checkpoint(root, main=True) == root / "checkpoint-6"


def test_a_whole_checkpoint_verifies_and_a_changed_byte_does_not(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    ckpt = _checkpoint(root, 3)
    assert torn(str(ckpt)) is None and (ckpt / MANIFEST).exists()
    data = bytearray((ckpt / "optimizer.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte different: only the sha256 tells
    (ckpt / "optimizer.pt").write_bytes(bytes(data))
    assert torn(str(ckpt)) == "optimizer.pt does not match its sha256 in the manifest"
    (ckpt / "optimizer.pt").unlink()
    assert torn(str(ckpt)) == "optimizer.pt is missing"
    assert pick(str(root)) == (None, ["checkpoint-3 skipped: optimizer.pt is missing"])


def test_the_checkpoint_the_supervisor_checked_is_not_hashed_again(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _cut(_checkpoint(root, 2) / "optimizer.pt")
    assert pick(str(root), trusted="checkpoint-2", set_aside=False) == (2, [])


def test_a_checkpoint_replaced_while_its_manifest_was_hashed_gets_none(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    ckpt = _checkpoint(root, 4, manifest=False)
    inode = ckpt.stat().st_ino
    ckpt.rename(tmp_path / "old")
    (tmp_path / "old").rename(root / "checkpoint-4.x")
    _checkpoint(root, 4, manifest=False)  # the same step saved again: another directory
    write_manifest(str(ckpt), inode)
    assert not (ckpt / MANIFEST).exists()
