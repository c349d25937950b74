"""Runs on real OpenSSH hosts (tests/sshd.py): run, ps across hosts, logs -f, stop, attach in a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA
from projects import make_project

pytestmark = pytest.mark.ssh


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "recipes").mkdir(parents=True)
    (r / "job.sh").write_text("echo job script\n")
    make_project(r)
    return r


def pippa(
    env: dict[str, str], repo: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def started(out: str) -> str:
    return next(line.split()[1] for line in out.splitlines() if line.startswith("started "))


def ps_json(env: dict[str, str], repo: Path, *args: str) -> dict[str, Any]:
    p = pippa(env, repo, "ps", "--json", *args)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def wait_for(predicate: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_run_syncs_starts_in_tmux_and_ps_logs_stop_work_across_hosts(client_env, ssh_hosts, repo) -> None:
    env = client_env.env
    h1, h2 = ssh_hosts[0], ssh_hosts[1]
    p = pippa(
        env,
        repo,
        "run",
        "--host",
        h1.name,
        "--name",
        "rs",
        "--cmd",
        "sh job.sh; echo user=$(whoami); sleep 30",
    )
    assert p.returncode == 0, p.stderr
    run_id = started(p.stdout)
    # the short attach line (issue 32: the ~200-character raw ssh command only with -v)
    assert f"attach:  pippa attach rs --host {h1.name}" in p.stdout and "tmux attach-session" not in p.stdout
    run_dir = h1.home / "pippa" / "runs" / run_id
    wait_for(
        lambda: (
            "user=" in (run_dir / "output.log").read_text() if (run_dir / "output.log").exists() else False
        )
    )
    assert (run_dir / "output.log").read_text() == f"job script\nuser={h1.user}\n"  # the synced file ran
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["session"] == "rs" and meta["sync"]["dirty"] is True

    h2.stop()  # one unreachable host is a row, not a crash
    table = ps_json(env, repo)
    assert "error" in table[h2.name] and "error" not in table[h1.name]
    (rec,) = [r for r in table[h1.name]["runs"] if r["run_id"] == run_id]
    assert (rec["run_id"], rec["state"], rec["session"]) == (run_id, "running", "rs")
    text = pippa(env, repo, "ps", "-v")  # whole ids (a busy host's table shows short ones at 80 columns)
    assert text.returncode == 0 and run_id in text.stdout and "unreachable" in text.stdout
    h2.start()

    logs = pippa(env, repo, "logs", "rs", "--host", h1.name)
    assert logs.stdout == f"job script\nuser={h1.user}\n"

    s = pippa(env, repo, "stop", "rs", "--grace", "5")  # found on h1 without --host
    assert s.returncode == 0, s.stderr
    assert f"{h1.name}: run {run_id} (session rs): stopped (exit 130)" in s.stdout
    (rec,) = [r for r in ps_json(env, repo, "--host", h1.name)[h1.name]["runs"] if r["run_id"] == run_id]
    assert rec["state_text"] == "stopped (exit 130)"


def test_logs_follow_over_ssh_streams_until_the_run_ends(client_env, ssh_hosts, repo) -> None:
    env = client_env.env
    h = ssh_hosts[2]
    p = pippa(
        env,
        repo,
        "run",
        "--host",
        h.name,
        "--name",
        "fl",
        "--cmd",
        "for i in 1 2 3; do echo n$i; sleep 0.4; done; exit 4",
    )
    assert p.returncode == 0, p.stderr
    f = pippa(env, repo, "logs", started(p.stdout), "--host", h.name, "-f")
    assert f.returncode == 4
    assert f.stdout == "n1\nn2\nn3\n"
    again = pippa(env, repo, "run", "--host", h.name, "--name", "fl", "--cmd", "echo two", "--follow")
    assert again.returncode == 0 and again.stdout.endswith("two\n")


def _viewer(tmp_path: Path, env: dict[str, str], argv: list[str]) -> tuple[dict[str, str], str]:
    """A separate tmux server holding a real terminal (a pane) that runs ``argv``."""
    venv = {k: v for k, v in env.items() if k != "TMUX"}
    venv["TMUX_TMPDIR"] = str(tmp_path / "viewer-tmux")
    Path(venv["TMUX_TMPDIR"]).mkdir()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", "viewer", "-x", "120", "-y", "30", *argv], env=venv, check=True
    )
    return venv, "=viewer:"


def _screen(venv: dict[str, str], pane: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", pane], env=venv, capture_output=True, text=True
    ).stdout


def test_attach_over_ssh_in_a_real_terminal_shows_the_run_and_detaching_leaves_it_going(
    client_env, ssh_hosts, repo, tmp_path
) -> None:
    env = client_env.env
    h = ssh_hosts[3]
    job = "i=0; while :; do i=$((i+1)); echo heartbeat-$i; sleep 0.5; done"
    p = pippa(env, repo, "run", "--host", h.name, "--name", "att", "--cmd", job)
    assert p.returncode == 0, p.stderr
    run_id = started(p.stdout)
    venv, pane = _viewer(tmp_path, env, ["env", f"PATH={os.environ['PATH']}", PIPPA, "attach", "att"])
    try:
        wait_for(lambda: "heartbeat-" in _screen(venv, pane))
        subprocess.run(["tmux", "send-keys", "-t", pane, "C-b", "d"], env=venv, check=True)
        wait_for(
            lambda: (
                "detached" in _screen(venv, pane)
                or subprocess.run(["tmux", "has-session", "-t", "=viewer"], env=venv).returncode != 0
            )
        )
    finally:
        subprocess.run(["tmux", "kill-server"], env=venv, capture_output=True)
    # The hosts are shared by the whole session: other tests' runs may be listed too.
    (rec,) = [r for r in ps_json(env, repo, "--host", h.name)[h.name]["runs"] if r["run_id"] == run_id]
    assert rec["state"] == "running"  # detaching left the run going
    pippa(env, repo, "stop", "att", "--host", h.name, "--grace", "2")


def test_attach_to_a_missing_session_says_so(client_env, ssh_hosts, repo) -> None:
    p = pippa(client_env.env, repo, "attach", "nosuch", "--host", ssh_hosts[0].name)
    assert p.returncode == 9 and p.stderr.strip().count("\n") == 0


def test_logs_follow_rides_out_a_dropped_connection_and_still_ends_with_the_jobs_code(
    client_env, ssh_hosts, repo
) -> None:
    env = client_env.env
    h = ssh_hosts[2]
    job = "for i in $(seq 1 40); do echo n$i; sleep 0.1; done; exit 3"
    p = pippa(env, repo, "run", "--host", h.name, "--name", "drop", "--cmd", job)
    assert p.returncode == 0, p.stderr
    follower = subprocess.Popen(
        [PIPPA, "logs", started(p.stdout), "--host", h.name, "-f"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    seen = [follower.stdout.readline() for _ in range(5)]
    assert seen[-1] == "n5\n"
    h.drop()  # the connection goes (as when a laptop sleeps); the run goes on on the host
    time.sleep(1.5)
    h.start()
    # Read on through the same buffered stream: communicate() reads the raw pipe and would miss
    # lines readline() had already buffered.
    rest = follower.stdout.read()
    assert follower.stderr is not None
    err = follower.stderr.read()
    follower.wait(60)
    assert follower.returncode == 3  # the job's own exit code, after the reconnect
    got = "".join(seen) + rest
    assert got == "".join(f"n{i}\n" for i in range(1, 41)), (got, err)  # nothing lost or repeated
    assert "reconnecting in" in err and "Traceback" not in err
