"""Torn files on a real host (a loopback OpenSSH host, real tmux, the real tiny trainer): a run stopped
with two checkpoints whose newest is then cut in half, and whose attempts.json is torn, resumes from the
previous whole checkpoint with one line saying which it skipped and why; the torn record is repaired
from its journal, so ``why`` still shows the stopped attempt, and the run completes with one row per
step."""

from __future__ import annotations

import json

import pytest
from test_restart_ssh import STEPS, held_at_step_4_once, pippa, records, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
SETS = ["--set", f"train.max_steps={STEPS}", "--set", "checkpoint.every=2", "--set", "eval.interval=1000"]


def test_a_torn_checkpoint_and_a_torn_attempts_json_resume_from_the_whole_one(client_env, ssh_hosts) -> None:
    env, h = client_env.env, ssh_hosts[2]
    held = held_at_step_4_once(client_env, h, "torn")
    run_id = started(pippa(env, "run", "tiny", "--host", h.name, "--name", "torn", *SETS))
    run_dir = h.home / "pippa" / "runs" / run_id
    ckpts = run_dir / "checkpoints"
    wait_for(
        lambda: held.exists() and (ckpts / "checkpoint-2").is_dir(),
        300,
        lambda: (run_dir / "output.log").read_text()[-3000:],
    )
    stop = pippa(env, "stop", run_id, "--host", h.name, "--grace", "120")
    assert stop.returncode == 0, stop.stderr
    wait_for(lambda: (run_dir / "exit_code").exists(), 120)
    *_, whole, newest = sorted(ckpts.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    at = int(whole.name.split("-")[1])  # the previous whole one, kept (checkpoint.keep = 2)
    assert (newest / "pippa-manifest.json").exists()  # written by the time the stopped trainer exited
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    attempts = run_dir / "attempts.json"
    assert json.loads(attempts.read_text())["attempts"][0]["class"] == "stopped"
    attempts.write_bytes(attempts.read_bytes()[:40])

    r = pippa(env, "resume", run_id, "--host", h.name)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith(
        f"resumed {run_id} from runs/{run_id}/checkpoints/{whole.name} ({newest.name} "
        "skipped: model.safetensors is "
    ), first
    wait_for(
        lambda: (run_dir / "exit_code").exists(), 300, lambda: (run_dir / "output.log").read_text()[-3000:]
    )
    log = (run_dir / "output.log").read_text()
    assert (run_dir / "exit_code").read_text() == "0\n", log[-3000:]
    assert steps(run_dir) == list(range(1, STEPS + 1))  # one row per step: none lost, none doubled
    (resumed,) = [x for x in records(run_dir) if x.get("type") == "header" and x.get("resumed_from_step")]
    assert resumed["resumed_from_step"] == at
    doc = json.loads(attempts.read_text())  # whole again
    one, two = doc["attempts"]
    assert one["class"] == "stopped" and two["class"] == "completed" and two["resumed_from_step"] == at
    (line,) = two["skipped_checkpoints"]
    assert line.startswith(f"{newest.name} skipped: model.safetensors is ") and "\n" not in line
    assert ", the manifest says " in line  # judged by its manifest, not only by its structure
    assert log.count("pippa: resume: ") == 1 and f"pippa: resume: {line}\n" in log  # one line, in the log
    assert (ckpts / f"{newest.name}.torn" / "model.safetensors").exists()  # set aside, not deleted
    why = pippa(env, "why", run_id, "--host", h.name)
    assert why.returncode == 0, why.stderr
    assert "attempt 1/2  stopped" in why.stdout and "attempt 2/2  completed" in why.stdout, why.stdout
    assert f"  resume: {line}\n  resumed from step {at}\n" in why.stdout, why.stdout
    ps = pippa(env, "ps", "--host", h.name)
    assert f": resumed past {line}" in ps.stdout, ps.stdout
