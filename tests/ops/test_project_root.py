"""The project root (pippa_ops.repo) and when a sync's deletions need a yes (pippa_ops.sync): pure rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pippa_ops import repo
from pippa_ops.sync import SyncResult, many_deletions


def test_a_pippa_project_holds_pippa_toml_or_recipes_and_training_core(tmp_path: Path) -> None:
    only_recipes = tmp_path / "a"
    (only_recipes / "recipes").mkdir(parents=True)
    toml = tmp_path / "b"
    toml.mkdir()
    (toml / "pippa.toml").write_text("")
    both = tmp_path / "c"
    (both / "recipes").mkdir(parents=True)
    (both / "training_core").mkdir()
    assert [repo.is_project(p) for p in (only_recipes, toml, both)] == [False, True, True]


def test_the_working_directorys_checkout_is_used_only_when_it_is_a_project(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(theirs)], check=True)
    found = repo.project(theirs / "sub")
    assert found.root == Path(repo.__file__).resolve().parents[1] and found.passed_over == theirs.resolve()
    assert found.line("sending") == f"sending {found.root} ({theirs.resolve()} is not a pippa project)"
    (theirs / "pippa.toml").write_text("")
    assert repo.project(theirs) == repo.Project(theirs.resolve())  # now it is one


def _result(deleted: int, files: int) -> SyncResult:
    names = tuple(f"f{i}" for i in range(deleted))
    return SyncResult("h", "~/pippa", files, (), names, 0, None, False, False, 0.0)


def test_more_than_a_handful_of_deletions_or_more_than_the_tree_holds_need_a_yes() -> None:
    assert not many_deletions(_result(deleted=1, files=300))  # a file removed here, mirrored there
    assert not many_deletions(_result(deleted=5, files=300))
    assert many_deletions(_result(deleted=6, files=300))
    assert many_deletions(_result(deleted=3, files=2))  # the tree sent is smaller than what goes
