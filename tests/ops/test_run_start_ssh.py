"""``pippa run`` reports the start, not the launch: it watches a recipe run until its trainer's first
line (the metrics header, written once torch and transformers are imported and the model and data are
loaded). A run that dies in start-up (here: a model that cannot be loaded offline, which fails the
way an undownloadable model does on a real host, several seconds in) makes ``pippa run`` exit
non-zero with the run's reason line; a healthy run returns once its first line is there, while it
trains. Real parts: a loopback sshd host, tmux, the real trainer on CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from projects import make_project
from sshd import SSHHost

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A project with the real trainer and the tiny recipe (what `pippa run` syncs to the host)."""
    dest = tmp_path / "proj"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "training_core", dest / "training_core", ignore=ignore)
    (dest / "recipes").mkdir()
    for name in ("base.toml", "tiny.toml"):
        shutil.copy(REPO / "recipes" / name, dest / "recipes")
    return make_project(dest)


@pytest.fixture
def host(
    request: pytest.FixtureRequest, client_env: ClientEnv, ssh_hosts: list[SSHHost]
) -> Iterator[SSHHost]:
    """Host t1 with a remote_dir of this test's own, offline as the model hub is here."""
    h = ssh_hosts[0]
    remote = f"run-start-{uuid.uuid4().hex[:8]}"
    inv = client_env.personal_inventory
    head = f"[hosts.{h.name}]\n"
    slow = getattr(request, "param", None)  # the metrics writer's pause after each write (testhooks)
    more = f', PIPPA_TEST_SLOW_RECORD = "{slow}"' if slow else ""
    extra = f'remote_dir = "~/{remote}"\nenv = {{ PIPPA_PLATFORM_OFFLINE = "1"{more} }}\n'
    inv.write_text(inv.read_text().replace(head, head + extra, 1))
    yield h
    h.run_as_user(["tmux", "kill-server"])
    h.run_as_user(["rm", "-rf", str(h.home / remote)])


def pippa(client_env: ClientEnv, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in client_env.env.items() if k != "PIPPA_RUN_WAIT_S"}  # the watch as users get it
    return subprocess.run([PIPPA, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=400)


def _metrics(h: SSHHost, run_id: str) -> list[dict[str, object]]:
    remote = next((h.home).glob("run-start-*"))
    path = remote / "runs" / run_id / "metrics.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_a_run_whose_model_cannot_load_fails_pippa_run_with_its_reason(client_env, host, repo) -> None:
    p = pippa(
        client_env,
        repo,
        "run",
        "tiny",
        "--host",
        host.name,
        "--name",
        "rs-bad",
        "--wait",
        "300",
        "--set",
        "model.name=no-such-org/no-such-model",
    )
    assert p.returncode == 1, (p.stdout, p.stderr)
    run_id = p.stdout.split()[1]
    assert p.stdout.startswith("started ")  # it did start: the id to look it up with
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"pippa: {host.name}: run {run_id} failed (exit 1) after "), line
    assert "OSError: We couldn't connect to 'https://huggingface.co' to load the files" in line, line
    records = _metrics(host, run_id)  # the trainer recorded the failed start itself
    assert [r["type"] for r in records] == ["header", "end"] and records[1]["status"] == "failed"
    why = pippa(client_env, repo, "why", run_id, "--host", host.name)
    (nxt,) = [ln for ln in why.stdout.splitlines() if ln.startswith("next: ")]
    assert nxt == (
        f"next: fix network or Hub cache: give the host access to huggingface.co, or put the model"
        f" and data in its HF_HOME cache; then pippa run tiny --host {host.name} --set "
        f"model.name=no-such-org/no-such-model"
    ), nxt  # never a resume: it would fail the same way


@pytest.mark.parametrize("host", ["2"], indirect=True)
def test_run_and_resume_never_take_a_failed_starts_header_for_a_start(client_env, host, repo) -> None:
    """The trainer's failed-start record (its header and end line) arrives in one write; here the
    writer waits 2 s after each write, as a loaded host may: had the header come alone, `run` (and
    `resume`) would have seen it and said the run started. Both exit 1 with the reason, every try."""
    bad = ("--set", "model.name=no-such-org/no-such-model")
    p = pippa(
        client_env, repo, "run", "tiny", "--host", host.name, "--name", "rs-race", "--wait", "300", *bad
    )
    assert p.returncode == 1, (p.stdout, p.stderr)
    run_id = p.stdout.split()[1]
    assert "couldn't connect to 'https://huggingface.co'" in p.stderr, p.stderr
    for _ in range(2):  # resume restarts from step 0 (no checkpoint) and fails the same way
        r = pippa(client_env, repo, "resume", run_id, "--host", host.name, "--wait", "300")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert r.stdout.startswith(f"resumed {run_id}: no checkpoint"), r.stdout
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"pippa: {host.name}: run {run_id} failed (exit 1) after "), line
        assert "couldn't connect to 'https://huggingface.co'" in line, line


def test_a_healthy_run_returns_at_its_first_line_while_it_trains(client_env, host, repo) -> None:
    t0 = time.monotonic()
    p = pippa(
        client_env,
        repo,
        "run",
        "tiny",
        "--host",
        host.name,
        "--name",
        "rs-ok",
        "--wait",
        "300",
        "--set",
        "train.max_steps=100000",
    )
    assert time.monotonic() - t0 < 300  # it did not sit out its bound
    assert p.returncode == 0, (p.stdout, p.stderr)
    run_id = p.stdout.split()[1]
    assert p.stderr == ""  # no "still starting": the first line came within the bound
    assert _metrics(host, run_id)[0]["type"] == "header"  # returned once the trainer had written it
    ps = subprocess.run(
        [PIPPA, "ps", "--host", host.name, "--json"],
        cwd=repo,
        env=client_env.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (rec,) = [r for r in json.loads(ps.stdout)[host.name]["runs"] if r["run_id"] == run_id]
    assert rec["state"] == "running"  # and it goes on training


def test_a_start_still_going_at_the_bound_returns_zero_and_says_so(client_env, host, repo) -> None:
    p = pippa(client_env, repo, "run", "tiny", "--host", host.name, "--name", "rs-slow", "--wait", "0.5")
    assert p.returncode == 0, (p.stdout, p.stderr)
    run_id = p.stdout.split()[1]
    (line,) = p.stderr.splitlines()
    assert f"run {run_id} is still starting after " in line and f"pippa logs {run_id} --host" in line


def test_on_a_terminal_the_wait_shows_one_line_of_progress(client_env, host, repo) -> None:
    env = {k: v for k, v in client_env.env.items() if k != "PIPPA_RUN_WAIT_S"}
    line = f"{PIPPA} run tiny --host {host.name} --name rs-tty --wait 300 --set train.max_steps=100000"
    shown = subprocess.run(
        ["script", "-qec", line, "/dev/null"], cwd=repo, env=env, capture_output=True, text=True, timeout=400
    )
    assert shown.returncode == 0, shown.stdout
    assert f"starting on {host.name}: " in shown.stdout  # redrawn in place, then erased
    assert shown.stdout.rstrip("\n").endswith("\x1b[2K") and shown.stdout.startswith("started ")


def test_resume_on_another_host_watches_the_start_there(client_env, host, ssh_hosts, repo) -> None:
    """``resume RUN --on HOST`` (move, then resume) said `resumed` and exited 0 however the start went
    on the new host: it watches it as `run` and `resume` do, and a failed start exits 1 with its reason."""
    other = ssh_hosts[1]
    remote = f"run-start-on-{uuid.uuid4().hex[:8]}"
    inv = client_env.personal_inventory
    head = f"[hosts.{other.name}]\n"
    inv.write_text(
        inv.read_text().replace(
            head, f'{head}remote_dir = "~/{remote}"\nenv = {{ PIPPA_PLATFORM_OFFLINE = "1" }}\n', 1
        )
    )
    try:
        p = pippa(
            client_env,
            repo,
            "run",
            "tiny",
            "--host",
            host.name,
            "--name",
            "rs-move",
            "--wait",
            "300",
            "--set",
            "model.name=no-such-org/no-such-model",
        )
        assert p.returncode == 1, (p.stdout, p.stderr)
        run_id = p.stdout.split()[1]
        r = pippa(client_env, repo, "resume", run_id, "--on", other.name, "--wait", "300")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"resumed {run_id} on {other.name}" in r.stdout, r.stdout
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"pippa: {other.name}: run {run_id} failed (exit 1) after "), line
        assert "couldn't connect to 'https://huggingface.co'" in line, line
    finally:
        other.run_as_user(["tmux", "kill-server"])
        other.run_as_user(["rm", "-rf", str(other.home / remote)])
