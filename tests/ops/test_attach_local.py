"""`pippa attach` on the host `local`, in a real terminal: a tmux pane (of another tmux server) runs it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from conftest import PIPPA
from projects import make_project


def _wait(predicate, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_local_attach_shows_the_run_and_detaching_leaves_it_running(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    make_project(repo)
    (tmp_path / "runs-tmux").mkdir()
    (tmp_path / "viewer-tmux").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path / "runs-tmux"), PIPPA_INVENTORY=str(tmp_path / "none.toml"))
    viewer = {**env, "TMUX_TMPDIR": str(tmp_path / "viewer-tmux")}
    job = "i=0; while :; do i=$((i+1)); echo beat-$i; sleep 0.5; done"
    p = subprocess.run(
        [PIPPA, "run", "--cmd", job, "--name", "live"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr

    def screen() -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", "=v:"], env=viewer, capture_output=True, text=True
        ).stdout

    try:
        # A terminal outside tmux: the pane must not inherit the viewer server's $TMUX.
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                "v",
                "-x",
                "100",
                "-y",
                "25",
                "-c",
                str(repo),
                "env",
                "-u",
                "TMUX",
                f"TMUX_TMPDIR={env['TMUX_TMPDIR']}",
                PIPPA,
                "attach",
                "live",
            ],
            env=viewer,
            check=True,
        )
        _wait(lambda: "beat-" in screen())
        subprocess.run(["tmux", "send-keys", "-t", "=v:", "C-b", "d"], env=viewer, check=True)
        _wait(lambda: subprocess.run(["tmux", "has-session", "-t", "=v"], env=viewer).returncode != 0)
        assert subprocess.run(["tmux", "has-session", "-t", "=live"], env=env).returncode == 0
    finally:
        subprocess.run(["tmux", "kill-server"], env=viewer, capture_output=True)
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
