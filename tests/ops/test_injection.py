"""Names that reach a shell are validated: injection attempts are refused with one line, and nothing runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import PIPPA
from projects import make_project

from pippa_ops.errors import BadSetting, InvalidName, UnknownRecipe
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.launch import launch
from pippa_ops.transport.base import LocalTransport


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    repo = tmp_path / "proj"
    (repo / "recipes").mkdir(parents=True)
    (repo / "recipes" / "tiny.toml").write_text('description = "t"\n')
    make_project(repo)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path), PIPPA_INVENTORY=str(tmp_path / "none.toml"))
    return repo, env, tmp_path / "pwned"


def _no_side_effect(repo: Path, env: dict[str, str], pwned: Path) -> None:
    assert not pwned.exists()
    assert not (repo / "runs").exists()
    sessions = subprocess.run(["tmux", "list-sessions"], env=env, capture_output=True, text=True)
    assert sessions.returncode != 0  # no tmux server was even started


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--cmd", "true", "--name", "x; touch {p}"],
        ["run", "tiny; touch {p}"],
        ["run", "tiny", "--set", "x;touch {p}=1"],
        ["run", "tiny", "--set", "$(touch {p})=1"],
        ["logs", "x; touch {p}"],
        ["stop", "$(touch {p})"],
        ["attach", "`touch {p}`", "--host", "local"],
    ],
)
def test_cli_refuses_injection_in_names_with_one_line_and_no_side_effect(
    sandbox: tuple[Path, dict[str, str], Path], args: list[str]
) -> None:
    repo, env, pwned = sandbox
    argv = [a.format(p=pwned) for a in args]
    p = subprocess.run([PIPPA, *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("pippa: ") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    _no_side_effect(repo, env, pwned)


def test_core_launch_validates_before_touching_the_host(
    sandbox: tuple[Path, dict[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, env, pwned = sandbox
    monkeypatch.setenv("TMUX_TMPDIR", env["TMUX_TMPDIR"])
    monkeypatch.chdir(repo)
    spec = HostSpec(name="local", remote_dir=str(repo))
    t = LocalTransport()
    with pytest.raises(InvalidName):
        launch(spec, t, command="true", session=f"x; touch {pwned}")
    with pytest.raises(InvalidName):
        launch(spec, t, recipes=[f"tiny && touch {pwned}"])
    with pytest.raises(UnknownRecipe):
        launch(spec, t, recipes=["nosuch"])
    with pytest.raises(BadSetting):
        launch(spec, t, recipes=["tiny"], sets=[f"a|touch {pwned}=1"])
    assert not (repo / ".pippa" / "sync.json").exists()  # refused before the sync (local: the marker)
    _no_side_effect(repo, env, pwned)
