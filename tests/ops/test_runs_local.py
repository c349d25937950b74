"""End to end on the host ``local``: the real pippa CLI, the real tmux, real job scripts.

Each test gets its own project checkout (a temp git repo: the host ``local`` runs there), its own
tmux server (TMUX_TMPDIR) and its own HOME (secrets file), so it never touches the developer's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA

SECRET = "s3cr3t-Value-42"
# A stand-in trainer for sweep mechanics: exits with the code its recipe name ends with.
FAKE_TRAIN = """import sys, time
recipe = sys.argv[1]
print("train", recipe, " ".join(sys.argv[2:]), flush=True)
time.sleep(0.2)
sys.exit(int(recipe.rsplit("_", 1)[1]))
"""


@dataclass
class Local:
    repo: Path
    env: dict[str, str]

    def pippa(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PIPPA, *args], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def ps(self) -> list[dict[str, Any]]:
        p = self.pippa("ps", "--host", "local", "--json")
        assert p.returncode == 0, p.stderr
        return list(json.loads(p.stdout)["local"]["runs"])

    def run_dir(self, run_id: str) -> Path:
        return self.repo / "runs" / run_id

    def wait_state(self, run_id: str, predicate: Any, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            rec = next(r for r in self.ps() if r["run_id"] == run_id)
            if predicate(rec) or time.monotonic() > deadline:
                return rec
            time.sleep(0.3)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True)


def started_ids(out: str) -> list[str]:
    return [line.split()[1] for line in out.splitlines() if line.startswith("started ")]


def local_env(tmp_path: Path) -> dict[str, str]:
    """pippa's environment for host ``local`` in ``tmp_path``: its own HOME, tmux server and no team
    inventory."""
    home = tmp_path / "home"
    (home / ".config" / "pippa").mkdir(parents=True)
    (tmp_path / "tmux").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "SSH_AUTH_SOCK")}
    env.update(
        HOME=str(home),
        TMUX_TMPDIR=str(tmp_path / "tmux"),
        XDG_CONFIG_HOME=str(home / ".config"),
        PIPPA_INVENTORY=str(tmp_path / "none.toml"),
    )
    return env


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    repo = tmp_path / "proj"
    (repo / "recipes").mkdir(parents=True)
    (repo / "training_core").mkdir()
    (repo / "training_core" / "__init__.py").write_text("")
    (repo / "training_core" / "launch.py").write_text(FAKE_TRAIN)  # pippa run starts the launcher
    for name in ("ok_0", "fail_2", "also_0"):
        (repo / "recipes" / f"{name}.toml").write_text(f'description = "sweep step {name}"\n')
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = local_env(tmp_path)
    secrets = Path(env["HOME"]) / ".config" / "pippa" / "secrets.env"
    secrets.write_text(f"SECRET_TOKEN='{SECRET}'\n")
    secrets.chmod(0o600)
    lo = Local(repo, env)
    yield lo
    lo.tmux("kill-server")


def test_run_cmd_records_output_and_exit_code_and_ps_logs_read_them(local: Local) -> None:
    p = local.pippa("run", "--cmd", "echo hello from job; echo oops >&2; exit 3", "--name", "job1")
    assert p.returncode == 0, p.stderr
    (run_id,) = started_ids(p.stdout)
    assert "session: job1" in p.stdout and "pippa attach job1 --host local" in p.stdout
    assert "host:    local   (the default host" in p.stdout  # no --host: it says where the run went
    assert f"pippa logs {run_id} --host local -f" in p.stdout
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert (rec["state"], rec["exit_code"], rec["session"]) == ("failed", 3, "job1")
    assert (rec["state_text"], rec["error"]) == ("failed (exit 3)", "oops")  # why it failed
    assert rec["command"] == "echo hello from job; echo oops >&2; exit 3"
    assert (local.run_dir(run_id) / "exit_code").read_text() == "3\n"
    logs = local.pippa("logs", "job1")
    assert logs.returncode == 0 and logs.stdout == "hello from job\noops\n"


def test_run_follow_streams_the_log_and_exits_with_the_jobs_code(local: Local) -> None:
    p = local.pippa("run", "--cmd", "for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 5", "--follow")
    assert p.returncode == 5, p.stderr
    assert "tick 1\ntick 2\ntick 3\n" in p.stdout


def test_logs_follow_catches_up_then_follows_until_the_run_ends(local: Local) -> None:
    p = local.pippa("run", "--cmd", "echo early; sleep 1; echo late", "--name", "fol")
    assert p.returncode == 0, p.stderr
    f = local.pippa("logs", "fol", "-f", timeout=30)
    assert f.returncode == 0, f.stderr
    assert f.stdout == "early\nlate\n"


def test_secrets_reach_the_job_but_not_argv_logs_scripts_or_ps(local: Local) -> None:
    job = 'test -n "$SECRET_TOKEN" && echo "secret has ${#SECRET_TOKEN} chars"; sleep 1'
    p = local.pippa("run", "--cmd", job, "--name", "sec")
    (run_id,) = started_ids(p.stdout)
    screen = local.tmux("capture-pane", "-p", "-t", "=sec:").stdout
    rec = local.wait_state(run_id, lambda r: r["state"] == "finished")
    log = (local.run_dir(run_id) / "output.log").read_text()
    assert log == f"secret has {len(SECRET)} chars\n"
    ps_all = local.pippa("ps", "--host", "local", "--json").stdout + local.pippa("ps").stdout
    for text in (log, screen, ps_all, p.stdout, p.stderr, json.dumps(rec)):
        assert SECRET not in text
    for name in ("cmd.sh", "run.json"):
        assert SECRET not in (local.run_dir(run_id) / name).read_text()


def test_stop_interrupts_first_so_the_job_can_save_and_records_how_it_ended(local: Local) -> None:
    job = "trap 'echo saving checkpoint; exit 7' INT; echo ready; while :; do sleep 0.1; done"
    p = local.pippa("run", "--cmd", job, "--name", "saver")
    (run_id,) = started_ids(p.stdout)
    local.wait_state(run_id, lambda r: r["state"] == "running")
    time.sleep(0.3)
    s = local.pippa("stop", "saver", "--grace", "10")
    assert s.returncode == 0, s.stderr
    assert "stopped (exit 7)" in s.stdout
    assert "saving checkpoint" in (local.run_dir(run_id) / "output.log").read_text()
    assert (local.run_dir(run_id) / "stop_requested").exists()
    assert local.tmux("has-session", "-t", "=saver").returncode != 0


def test_stop_kills_a_job_that_ignores_ctrl_c_after_the_grace_period(local: Local) -> None:
    p = local.pippa("run", "--cmd", "trap '' INT; sleep 30", "--name", "stubborn")
    (run_id,) = started_ids(p.stdout)
    local.wait_state(run_id, lambda r: r["state"] == "running")
    t0 = time.monotonic()
    s = local.pippa("stop", run_id, "--grace", "1")
    assert s.returncode == 0, s.stderr
    assert time.monotonic() - t0 < 25  # killed after the grace, not after the 30 s sleep
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert rec["state"] == "killed" and rec["exit_code"] is None


def test_stop_with_no_grace_says_it_kills_at_once_and_sends_no_ctrl_c(local: Local) -> None:
    job = "trap 'echo saving checkpoint; exit 7' INT; echo ready; while :; do sleep 0.1; done"
    p = local.pippa("run", "--cmd", job, "--name", "nograce")
    (run_id,) = started_ids(p.stdout)
    local.wait_state(run_id, lambda r: r["state"] == "running")
    s = local.pippa("stop", "nograce", "--grace", "0")
    assert s.returncode == 0, s.stderr
    assert "at once (--grace 0: no Ctrl-C, so no save)" in s.stderr and "Ctrl-C to" not in s.stderr
    local.wait_state(run_id, lambda r: r["state"] != "running")
    assert "saving checkpoint" not in (local.run_dir(run_id) / "output.log").read_text()


def test_a_running_session_is_refused_unless_replace(local: Local) -> None:
    first = local.pippa("run", "--cmd", "sleep 30", "--name", "dup")
    (old,) = started_ids(first.stdout)
    again = local.pippa("run", "--cmd", "sleep 30", "--name", "dup")
    assert again.returncode == 8
    assert again.stderr.strip().count("\n") == 0 and "'dup' is running" in again.stderr
    assert len(local.ps()) == 1  # nothing was written for the refused launch
    rep = local.pippa("run", "--cmd", "sleep 30", "--name", "dup", "--replace")
    assert rep.returncode == 0, rep.stderr
    (new,) = started_ids(rep.stdout)
    states = {r["run_id"]: r["state"] for r in local.ps()}
    assert states == {old: "killed", new: "running"}


def test_sweep_runs_recipes_in_turn_in_one_session_and_a_failure_does_not_stop_it(local: Local) -> None:
    p = local.pippa("run", "ok_0", "fail_2", "also_0", "--name", "sweep", "--gap", "1", "--follow")
    assert p.returncode == 2, p.stderr  # the failing job's code
    ids = started_ids(p.stdout)
    assert len(ids) == 3
    recs = {r["run_id"]: r for r in local.ps()}
    assert [recs[i]["exit_code"] for i in ids] == [0, 2, 0]
    assert [recs[i]["sweep_index"] for i in ids] == [0, 1, 2]
    assert {recs[i]["session"] for i in ids} == {"sweep"}
    assert recs[ids[0]]["started"] < recs[ids[1]]["started"] < recs[ids[2]]["started"]  # one after another
    out = (local.run_dir(ids[1]) / "output.log").read_text()
    assert out.startswith(f"train fail_2 --run-dir {local.run_dir(ids[1])}")


def test_unknown_recipe_is_one_line_listing_the_known_ones(local: Local) -> None:
    p = local.pippa("run", "nosuch")
    assert p.returncode == 2
    assert p.stderr.strip() == "pippa: unknown recipe 'nosuch'; known recipes: also_0, fail_2, ok_0"


def test_recipes_lists_names_and_descriptions(local: Local) -> None:
    p = local.pippa("recipes", "--json")
    assert json.loads(p.stdout)[0] == {"name": "also_0", "description": "sweep step also_0"}


@pytest.mark.slow
def test_main_job_tiny_on_local_runs_the_real_trainer_and_ps_shows_its_last_step(tmp_path: Path) -> None:
    """The README's main job through pippa (a few steps): real trainer, real tmux, metrics read back."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    (tmp_path / "tmux").mkdir()
    env.update(TMUX_TMPDIR=str(tmp_path / "tmux"), PIPPA_INVENTORY=str(tmp_path / "none.toml"))
    p = subprocess.run(
        [PIPPA, "run", "tiny", "--set", "train.max_steps=2", "--name", "smoke-test", "--follow"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    (run_id,) = started_ids(p.stdout)
    try:
        ps = subprocess.run(
            [PIPPA, "ps", "--host", "local", "--json"], cwd=root, env=env, capture_output=True, text=True
        )
    finally:
        shutil.rmtree(root / "runs" / run_id, ignore_errors=True)  # the repo's own runs/ (git-ignored)
    rec = next(r for r in json.loads(ps.stdout)["local"]["runs"] if r["run_id"] == run_id)
    assert (rec["state"], rec["exit_code"], rec["recipe"], rec["last_step"]) == ("finished", 0, "tiny", 2)
    assert rec["last_reward"] is not None


def test_bad_set_key_or_value_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The trainer's own --check runs locally first: one line, exit 2, no run dir, no tmux server."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    (tmp_path / "tmux").mkdir()
    env.update(TMUX_TMPDIR=str(tmp_path / "tmux"), PIPPA_INVENTORY=str(tmp_path / "none.toml"))
    runs_before = set((root / "runs").glob("*")) if (root / "runs").is_dir() else set()
    for item, why in [
        ("train.learnig_rate=1", "unknown setting 'train.learnig_rate'; nearest valid keys: train.learning"),
        ("train.learning_rate=fast", "bad value for train.learning_rate: expected a number, got 'fast'"),
    ]:
        p = subprocess.run(
            [PIPPA, "run", "tiny", "--set", item, "--name", "badset"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.startswith(f"pippa: recipe tiny: {why}") and p.stderr.count("\n") == 1
    # other tests may start runs in this checkout meanwhile: none of the new dirs may be this one's
    new = (set((root / "runs").glob("*")) if (root / "runs").is_dir() else set()) - runs_before
    assert not [d for d in new for f in d.rglob("*") if f.is_file() and b"badset" in f.read_bytes()]
    assert not list((tmp_path / "tmux").rglob("default"))  # no tmux server was ever started


def test_resume_continues_a_failed_recipe_run_in_its_own_run_dir_with_resume(local: Local) -> None:
    p = local.pippa("run", "fail_2", "--name", "res")
    (run_id,) = started_ids(p.stdout)
    local.wait_state(run_id, lambda r: r["state"] == "failed")
    r = local.pippa("resume", run_id, "--host", "local", "--follow")
    assert r.returncode == 2, r.stderr  # the resumed job's code
    assert f"resumed {run_id}" in r.stdout and "session: res" in r.stdout
    (rec,) = local.ps()  # the same run, not a new one
    run_dir = local.run_dir(run_id)
    # exit 2 is the failure class `config` (issue 34); the reason line is the job's last line
    why = f"config (train fail_2 --run-dir {run_dir} --resume) after 2 attempts"
    assert (rec["run_id"], rec["state_text"], rec["session"]) == (run_id, why, "res")
    log = (local.run_dir(run_id) / "output.log").read_text().splitlines()
    job = [line for line in log if not line.startswith("pippa: ")]  # the supervisor's banners aside
    assert job == [f"train fail_2 --run-dir {run_dir}", f"train fail_2 --run-dir {run_dir} --resume"]
    assert len(json.loads((run_dir / "run.json").read_text())["resumed"]) == 1


def test_resume_refuses_a_running_a_command_and_a_finished_run_in_one_line(local: Local) -> None:
    p = local.pippa("run", "--cmd", "sleep 30", "--name", "busy")
    (run_id,) = started_ids(p.stdout)
    local.wait_state(run_id, lambda r: r["state"] == "running")
    busy = local.pippa("resume", run_id, "--host", "local")
    assert busy.returncode == 8 and "still running" in busy.stderr and busy.stderr.count("\n") == 1
    local.pippa("stop", run_id, "--grace", "1")
    cmd = local.pippa("resume", "busy", "--host", "local")
    assert cmd.returncode == 2 and "(--cmd), not a recipe" in cmd.stderr and cmd.stderr.count("\n") == 1
    done = local.pippa("run", "ok_0", "--name", "done", "--follow")
    (done_id,) = started_ids(done.stdout)
    again = local.pippa("resume", done_id, "--host", "local")
    assert again.returncode == 2 and "finished (exit 0): nothing to resume" in again.stderr
    assert local.tmux("has-session", "-t", "=busy").returncode != 0  # nothing was started
