"""``pippa dash`` in a real terminal: tmux runs it, keys go in with send-keys, the screen comes back
with capture-pane. Attach suspends the app, attaches to the run's tmux session over ``ssh -t``, and
the app comes back when the user detaches (C-b d)."""

from __future__ import annotations

import secrets
import subprocess
import time

import fake_smi
import pytest
from conftest import PIPPA

from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import resolve
from pippa_ops.runs.launching.launch import launch

pytestmark = pytest.mark.ssh


class Term:
    def __init__(self, env: dict[str, str]) -> None:
        self.socket = "pippa-dash-" + secrets.token_hex(3)
        self.env = env

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True, check=True
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "dash")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")
            time.sleep(0.2)


def test_dash_in_tmux_keys_help_attach_detach_quit(ssh_hosts, ssh_env) -> None:
    t4 = ssh_hosts[3]
    t4.install_bin("nvidia-smi", fake_smi.script(gpus=1, python=t4.python))
    session = "attach" + secrets.token_hex(2)
    env = ssh_env.env
    env.pop("TMUX", None)
    spec = resolve(t4.name)
    with open_transport(spec) as t:
        run_id = launch(
            spec, t, command="echo attached-here; sleep 300", session=session, sync=False
        ).run_ids[0]

    term = Term(env)
    term.tmux("new-session", "-d", "-s", "dash", "-x", "160", "-y", "48", PIPPA, "dash", t4.name)
    try:
        screen = term.wait_for("1 GPU")
        assert "H100 80GB HBM3" in screen
        term.wait_for(run_id[:20])
        term.tmux("send-keys", "-t", "dash", "?")
        term.wait_for("pippa dash: keys")
        term.tmux("send-keys", "-t", "dash", "Escape")
        time.sleep(0.5)
        term.tmux("send-keys", "-t", "dash", "a")
        # The run's own tmux session fills the terminal: its status bar, not the dashboard.
        screen = term.wait_for(f"[{session[:9]}")  # tmux's status-left shows 10 characters
        assert "attached-here" in screen and "pippa dash" not in screen
        term.tmux("send-keys", "-t", "dash", "C-b", "d")
        screen = term.wait_for("1 GPU")  # detached: the dashboard is back
        assert "pippa dash" in screen
        term.tmux("send-keys", "-t", "dash", "q")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if (
                "dash"
                not in subprocess.run(
                    ["tmux", "-L", term.socket, "list-sessions"], capture_output=True, text=True, env=env
                ).stdout
            ):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("q did not quit the dashboard")
    finally:
        subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, env=env)
        t4.run_as_user(["tmux", "kill-session", "-t", f"={session}"])


def test_gpus_watch_shows_the_processes_the_one_shot_table_shows(ssh_hosts, ssh_env) -> None:
    """The watch's samples come from nvidia-smi's loop, which has no processes: they are asked for too."""
    h = ssh_hosts[2]
    h.install_bin("nvidia-smi", fake_smi.script(gpus=1, python=h.python, apps=str(fake_smi.APPS), count=True))
    env = {k: v for k, v in ssh_env.env.items() if k != "TMUX"}
    once = subprocess.run(
        [PIPPA, "gpus", h.name], env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60
    )
    assert "gpu_burn" in once.stdout, once.stdout + once.stderr
    term = Term(env)
    term.tmux(
        "new-session",
        "-d",
        "-s",
        "dash",
        "-x",
        "200",
        "-y",
        "20",
        PIPPA,
        "gpus",
        h.name,
        "--watch",
        "--interval",
        "0.5",
    )
    try:
        screen = term.wait_for(" 97%")  # the stream's 4th sample, not the first query's table
        assert "gpu_burn" in screen and "11345" in screen, screen
    finally:
        subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, env=env)
