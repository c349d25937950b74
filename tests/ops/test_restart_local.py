"""Runs that restart themselves, on the host ``local``: the real CLI, real tmux, the real supervisor.

Retry mechanics with jobs that fail on purpose (cheap); the real trainer's kill, hang and resume are
in test_restart_ssh.py. Each test has its own checkout, HOME and tmux server (TMUX_TMPDIR).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_runs_local

from pippa_ops.alerts.commands import run_end_line
from pippa_ops.transport import agent_bundle

PREVIOUS = Path(__file__).parents[1] / "fixtures" / "previous"  # files the previous version put on hosts
PREVIOUS_SUPERVISOR_LINE = '    python3 -S -I "$RUN_DIR/supervise.py" "$RUN_DIR"'
PREVIOUS_RUN_END = (
    '[ -f "$HOME"/.config/pippa/alerts/hostalerts.py ] && '
    'python3 -S "$HOME"/.config/pippa/alerts/hostalerts.py event --run-dir "$RUN_DIR" --detach'
    " >/dev/null 2>&1 || :"
)

# A stand-in trainer: prints its argv; ``slow`` waits unless resumed (to be lost), ``diverge`` ends its
# metrics the way training_core ends a run whose loss became NaN.
FAKE_TRAIN = """import json, os, sys, time
print("train", " ".join(sys.argv[1:]), flush=True)
if sys.argv[1] == "diverge":
    end = {"type": "end", "status": "diverged", "step": 3, "time": time.time(),
           "error": "diverged at step 3: loss/total is nan"}
    with open(os.path.join(os.environ["PIPPA_RUN_DIR"], "metrics.jsonl"), "a") as f:
        f.write(json.dumps(end) + "\\n")
    print("error: diverged at step 3: loss/total is nan", file=sys.stderr)
    sys.exit(1)
if sys.argv[1] == "thrice":  # waits on its first two starts, ends at once on the third
    n = int(open("count").read()) + 1 if os.path.exists("count") else 1
    open("count", "w").write(str(n))
    if n < 3:
        time.sleep(120)
    sys.exit(0)
if "--resume" not in sys.argv:
    time.sleep(120)
"""
# A job that counts its attempts in a file and fails each with a line naming the attempt.
COUNT = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count"


class Local(test_runs_local.Local):
    """Host ``local`` of test_runs_local, with what the restart tests read: attempts, the log."""

    def start(self, *args: str) -> str:
        p = self.pippa("run", "--host", "local", *args)
        assert p.returncode == 0, p.stderr
        return next(line.split()[1] for line in p.stdout.splitlines() if line.startswith("started "))

    def record(self, run_id: str) -> dict[str, Any]:
        return next(r for r in self.ps() if r["run_id"] == run_id)

    def wait_state(self, run_id: str, predicate: Any, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            rec = self.record(run_id)
            if predicate(rec):
                return rec
            assert time.monotonic() < deadline, f"timed out; last: {rec}\n{self.log(run_id)}"
            time.sleep(0.3)

    def log(self, run_id: str) -> str:
        path = self.repo / "runs" / run_id / "output.log"
        return path.read_text() if path.exists() else ""

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        return list(json.loads((self.repo / "runs" / run_id / "attempts.json").read_text())["attempts"])


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    repo = tmp_path / "proj"
    (repo / "recipes").mkdir(parents=True)
    (repo / "training_core").mkdir()
    (repo / "training_core" / "__init__.py").write_text("")
    (repo / "training_core" / "launch.py").write_text(FAKE_TRAIN)
    (repo / "recipes" / "slow.toml").write_text('description = "waits unless resumed"\n')
    (repo / "recipes" / "diverge.toml").write_text('description = "diverges at step 3"\n')
    (repo / "recipes" / "thrice.toml").write_text('description = "ends on its third start"\n')
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    lo = Local(repo, test_runs_local.local_env(tmp_path))
    yield lo
    lo.tmux("kill-server")


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_job_that_keeps_crashing_ends_after_n_plus_1_attempts_with_its_last_reason(local: Local) -> None:
    cmd = f'{COUNT}; echo "Error: boom $n" >&2; exit 1'
    run_id = local.start("--cmd", cmd, "--name", "crash", "--retry", "2", "--backoff", "0.2s")
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert (rec["state"], rec["exit_code"]) == ("failed", 1)
    assert (rec["state_text"], rec["error"]) == ("failed after 3 attempts (exit 1)", "Error: boom 3")
    attempts = local.attempts(run_id)
    assert [(a["attempt"], a["outcome"], a["exit_code"], a["reason"]) for a in attempts] == [
        (i, "failed", 1, f"Error: boom {i}") for i in (1, 2, 3)
    ]
    assert all(a["end"] >= a["start"] for a in attempts)
    log = local.log(run_id)
    assert [ln for ln in log.splitlines() if ln.startswith("Error")] == [
        f"Error: boom {i}" for i in (1, 2, 3)
    ]  # each attempt's output stays
    assert "pippa: ===== attempt 2/3 =====" in log and "pippa: ===== attempt 3/3 =====" in log
    assert "pippa: attempt 3/3 crash: Error: boom 3 (exit 1): no attempts left" in log
    ps = local.pippa("ps", "--host", "local")
    assert f"local {run_id}: failed after 3 attempts (exit 1): Error: boom 3" in ps.stdout.replace("\n", "")


def test_a_configuration_error_exit_2_is_not_retried(local: Local) -> None:
    cmd = f"{COUNT}; echo 'error: unknown setting train.nope' >&2; exit 2"
    run_id = local.start("--cmd", cmd, "--name", "usage", "--retry", "3", "--backoff", "0.1s")
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert (rec["state_text"], rec["error"]) == (
        "config (error: unknown setting train.nope)",
        "error: unknown setting train.nope",
    )
    assert [a["outcome"] for a in local.attempts(run_id)] == ["failed"]
    assert (local.repo / "count").read_text() == "1\n"
    assert "a configuration or usage error (exit 2): not retried" in local.log(run_id)
    assert local.attempts(run_id)[0]["class"] == "config"


def test_a_run_stopped_with_pippa_stop_is_not_retried(local: Local) -> None:
    run_id = local.start(
        "--cmd", "echo started; sleep 60", "--name", "stopme", "--retry", "3", "--backoff", "0.1s"
    )
    wait_for(lambda: "started" in local.log(run_id))
    assert local.record(run_id)["state_text"] == "running (attempt 1/4)"
    s = local.pippa("stop", run_id, "--host", "local", "--grace", "20")
    assert s.returncode == 0, s.stderr
    rec = local.record(run_id)
    assert rec["state"] == "stopped", rec
    assert [a["outcome"] for a in local.attempts(run_id)] == ["stopped"]
    assert "attempt 2" not in local.log(run_id)


def test_a_job_silent_past_its_stall_timeout_is_ended_and_retried(local: Local) -> None:
    cmd = f'{COUNT}; echo "tick $n"; if [ "$n" = 1 ]; then sleep 60; fi; echo "done $n"'
    args = ("--stall-timeout", "2s", "--retry", "1", "--backoff", "0.1s")
    run_id = local.start("--cmd", cmd, "--name", "hang", *args)
    wait_for(lambda: "tick 1" in local.log(run_id))
    silent_since = time.monotonic()
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert time.monotonic() - silent_since < 2 + 10  # detected within stall-timeout + 10 s
    assert rec["state_text"] == "finished (exit 0)"
    attempts = local.attempts(run_id)
    assert [(a["outcome"], a["reason"]) for a in attempts] == [
        ("stalled", "no new output for 2s"),
        ("completed", None),
    ]
    log = local.log(run_id)
    assert "pippa: attempt 1 stalled: no new output for 2s; ending it" in log and "done 2" in log


def test_a_lost_session_shows_lost_and_recover_resumes_it_with_its_attempts_counted(local: Local) -> None:
    run_id = local.start("slow", "--name", "night", "--retry", "1", "--backoff", "0.1s")
    wait_for(lambda: "train slow" in local.log(run_id))
    assert local.record(run_id)["state_text"] == "running (attempt 1/2)"
    local.tmux("kill-server")  # a reboot, an OOM killer taking tmux: no exit code is written
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert (rec["state_text"], rec["exit_code"]) == ("lost", None)

    r = local.pippa("recover", "local")
    assert r.returncode == 0, r.stderr
    assert f"local: resumed {run_id} in session night (attempt 2/2, no checkpoint: from step 0)" in r.stdout
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert rec["state_text"] == "finished (exit 0)", local.log(run_id)
    assert [a["outcome"] for a in local.attempts(run_id)] == ["lost", "completed"]
    run_dir = local.repo / "runs" / run_id
    assert f"train slow --run-dir {run_dir} --resume" in local.log(run_id)
    again = local.pippa("recover", "local")  # nothing left to do
    assert again.returncode == 0 and again.stdout.strip() == "local: no lost runs"


def test_a_lost_attempt_spends_no_retry_a_run_without_retry_is_recovered_too(local: Local) -> None:
    run_id = local.start("slow", "--name", "bare")  # no --retry: a recipe run is still supervised
    wait_for(lambda: "train slow" in local.log(run_id))
    local.tmux("kill-server")
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert rec["state"] == "lost"
    r = local.pippa("recover", "local")
    assert r.returncode == 0 and f"local: resumed {run_id} in session bare (attempt 2/2" in r.stdout, r.stdout
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert rec["state_text"] == "finished (exit 0)", local.log(run_id)
    first, second = local.attempts(run_id)
    assert (first["class"], second["class"]) == ("lost", "completed")


def test_a_diverged_run_is_not_retried_unless_asked(local: Local) -> None:
    run_id = local.start("diverge", "--name", "nan", "--retry", "2", "--backoff", "0.1s")
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert (rec["state_text"], rec["error"]) == ("diverged", "diverged at step 3: loss/total is nan")
    assert [a["outcome"] for a in local.attempts(run_id)] == ["diverged"]
    assert "not retried (--retry-diverged retries it)" in local.log(run_id)

    asked = local.start("diverge", "--name", "nan2", "--retry", "1", "--backoff", "0.1s", "--retry-diverged")
    rec = local.wait_state(asked, lambda r: r["state"] != "running")
    assert rec["state_text"] == "diverged after 2 attempts (exit 1)"
    assert [a["outcome"] for a in local.attempts(asked)] == ["diverged", "diverged"]


def test_recovery_at_boot_resumes_a_lost_run_on_the_host_alone(local: Local) -> None:
    run_id = local.start("slow", "--name", "boot", "--retry", "1", "--backoff", "0.1s")
    wait_for(lambda: "train slow" in local.log(run_id))
    local.tmux("kill-server")  # the reboot
    wait_for(lambda: local.record(run_id)["state"] == "lost")
    # what the @reboot line runs (pippa_ops.provision.boot), with no laptop involved
    program = local.repo / "runs" / run_id / "agent.pyz"  # the host program the run started with
    argv = ["python3", "-S", "-I", str(program), "recover", str(local.repo)]
    p = subprocess.run(argv, env=local.env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout) == {"resumed": [[run_id, "boot"]], "skipped": []}, p
    rec = local.wait_state(run_id, lambda r: r["state"] != "running")
    assert rec["state_text"] == "finished (exit 0)", local.log(run_id)
    assert [a["outcome"] for a in local.attempts(run_id)] == ["lost", "completed"]
    again = subprocess.run(argv, env=local.env, capture_output=True, text=True, timeout=30)
    assert json.loads(again.stdout) == {"resumed": [], "skipped": []}  # finished: nothing to do


def test_pippa_resume_of_a_supervised_run_is_one_more_recorded_attempt(local: Local) -> None:
    run_id = local.start("diverge", "--name", "again", "--retry", "1", "--backoff", "0.1s")
    local.wait_state(run_id, lambda r: r["state"] == "diverged")
    r = local.pippa("resume", run_id, "--host", "local")
    assert r.returncode == 0, r.stderr
    rec = local.wait_state(run_id, lambda r: r["state"] == "diverged" and len(local.attempts(run_id)) == 2)
    assert rec["state_text"] == "diverged after 2 attempts (exit 1)"
    run_dir = local.repo / "runs" / run_id
    assert f"train diverge --run-dir {run_dir} --resume" in local.log(run_id)


def as_previous_version(run_dir: Path) -> None:
    """Make a run directory what the previous version launched: the supervisor's source copied into it,
    cmd.sh running that copy and the previous alert hook, no link to a host program."""
    cmd = (run_dir / "cmd.sh").read_text()
    new_line = '    python3 -S -I "$RUN_DIR/agent.pyz" supervise "$RUN_DIR"'
    assert new_line in cmd and run_end_line() in cmd
    cmd = cmd.replace(new_line, PREVIOUS_SUPERVISOR_LINE).replace(run_end_line(), PREVIOUS_RUN_END)
    (run_dir / "cmd.sh").write_text(cmd)
    shutil.copy(PREVIOUS / "supervise.py", run_dir / "supervise.py")
    (run_dir / "agent.pyz").unlink()


def running_argv(needle: str) -> list[list[str]]:
    """The argv of each process of this machine with ``needle`` among its arguments."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle.encode() in argv:
            found.append([a.decode(errors="replace") for a in argv])
    return found


def test_a_run_the_previous_version_started_is_listed_recovered_stopped_and_resumed(local: Local) -> None:
    """Upgrade in place: a run whose directory holds the previous version's supervisor copy."""
    run_id = local.start("thrice", "--name", "old", "--retry", "2", "--backoff", "0.1s")
    run_dir = local.repo / "runs" / run_id
    wait_for(lambda: "train thrice" in local.log(run_id))
    local.tmux("kill-server")  # a reboot
    wait_for(lambda: local.record(run_id)["state"] == "lost")
    as_previous_version(run_dir)
    rec = local.record(run_id)
    assert (rec["state"], rec["attempt"], rec["max_attempts"]) == ("lost", 1, 3)

    # recovered at boot by the new host program: the run's own cmd.sh runs its own supervisor copy
    program = Path(local.env["HOME"]) / ".cache" / "pippa" / f"agent-{agent_bundle.digest()}.pyz"
    argv = ["python3", "-S", "-I", str(program), "recover", str(local.repo)]
    p = subprocess.run(argv, env=local.env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout) == {"resumed": [[run_id, "old"]], "skipped": []}, p
    wait_for(lambda: local.log(run_id).count("train thrice") == 2)
    rec = local.record(run_id)
    assert (rec["state"], rec["attempt"]) == ("running", 2)
    assert running_argv(str(run_dir / "supervise.py")), "the previous version's supervisor runs it"

    stop = local.pippa("stop", run_id, "--host", "local", "--grace", "10")
    assert stop.returncode == 0, stop.stderr
    local.wait_state(run_id, lambda r: r["state"] != "running")
    assert [a["outcome"] for a in local.attempts(run_id)] == ["lost", "stopped"]

    resumed = local.pippa("resume", run_id, "--host", "local")
    assert resumed.returncode == 0, resumed.stderr
    rec = local.wait_state(run_id, lambda r: r["state"] == "finished")
    assert [a["outcome"] for a in local.attempts(run_id)] == ["lost", "stopped", "completed"]
    assert (run_dir / "agent.pyz").resolve() == program.resolve(), "the new version carries it on"
