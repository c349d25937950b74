"""``pippa why``'s reading of a run record (pippa_ops.runs.reading.why): pure, on records as listings
make them."""

from __future__ import annotations

from pippa_ops.runs.reading.why import explain, render
from pippa_ops.runs.records.listing import RunRecord

SUSPECT = "rank 1 is not in the collective (rank 0 waits in all_gather (...)); it is in wander_off"
STACKS = {
    "0/11": ["all_gather (torch/distributed/distributed_c10d.py:3012)"],
    "1/12": ["wander_off (training_core/run/testhooks.py:31)"],
}
STALLED = {
    "attempt": 1,
    "exit_code": 137,
    "outcome": "stalled",
    "class": "stalled",
    "reason": "no new metrics line for 15s",
    "lines": [],
    "decision": {"retry": True, "spends": "infra", "why": "infrastructure retry 1/3 (not in --retry)"},
    "forensics": {
        "dir": "forensics/attempt-1",
        "suspect": {"kind": "rank", "rank": 1, "text": SUSPECT},
        "stacks": STACKS,
    },
}
DONE = {"attempt": 2, "exit_code": 0, "outcome": "completed", "class": "completed", "reason": "exit 0"}


def _rec(**kw: object) -> RunRecord:
    base: dict[str, object] = {
        "host": "h100-a",
        "run_id": "20261126-1-tiny-ab12",
        "session": "night",
        "recipe": "tiny",
        "command": "python -m training_core.launch",
    }
    return RunRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_a_stalled_then_completed_run_shows_class_retry_suspect_and_stacks() -> None:
    rec = _rec(
        state="finished",
        exit_code=0,
        attempts_doc={"max_attempts": 2, "attempts": [STALLED, DONE]},
        attempt=2,
        max_attempts=2,
    )
    why = explain(rec)
    assert [a.cls for a in why.attempts] == ["stalled", "completed"]
    text = "\n".join(render(why, rec.max_attempts))
    assert "attempt 1/2  stalled (no new metrics line for 15s)" in text
    assert "then: infrastructure retry 1/3" in text and "suspect: rank 1 is not in the collective" in text
    assert "wander_off (training_core/run/testhooks.py:31)" in text
    assert why.next == "pippa pull 20261126-1-tiny-ab12 --host h100-a"
    assert why.to_json()["attempts"][0]["stuck"]["1/12"] == ["wander_off (training_core/run/testhooks.py:31)"]


def test_a_run_without_a_supervisor_record_is_classed_from_its_listing() -> None:
    why = explain(_rec(state="failed", exit_code=1, error="KeyError: 'answer'"))
    assert why.attempts[0].cls == "crash" and why.next.startswith("pippa resume")
    assert explain(_rec(state="lost")).next == "pippa recover h100-a"
    gpu = {"attempt": 1, "class": "gpu-fault", "reason": "Xid 79 on GPU PCI:0000:3b:00", "exit_code": 134}
    assert "--on" in explain(_rec(state="failed", exit_code=134, attempts_doc={"attempts": [gpu]})).next


def test_a_run_that_failed_before_its_first_step_is_told_to_fix_the_cause_never_to_resume() -> None:
    """The listing marks the run (its end line's ``at_start``; an older run: no step line at all), and
    why's next names the cause and the run command with its settings."""
    from pippa_ops.runs.records.listing import host_runs

    command = "/h/.venv/bin/python -m training_core.launch tiny --run-dir /h/runs/r --set model.name=org/m"
    meta = {"recipe": "tiny", "command": command, "session": "s"}
    cpu = "UsageError: this host has an NVIDIA GPU (H100) but torch 2.5 is a CPU-only build"
    for end in (
        {"type": "end", "status": "failed", "step": 0, "at_start": True, "error": cpu},
        {"type": "end", "status": "failed", "step": 0, "error": "wandb.errors.AuthenticationError"},
    ):
        raw = {
            "run_id": "20261126-120000-tiny-ab12",
            "meta": meta,
            "exit_code": "1",
            "steps": [],
            "end": end,
            "error": end["error"],
        }
        (rec,) = host_runs("h100-a", {"now": 2000.0, "runs": [raw]}).runs
        assert rec.failed_at_start
        nxt = explain(rec).next
        assert "resume" not in nxt, nxt
        assert nxt.endswith("then pippa run tiny --host h100-a --set model.name=org/m"), nxt
    assert explain(rec).next.startswith("fix the W&B key: fix WANDB_API_KEY where it came from")
    raw["steps"] = [{"type": "step", "step": 3}]  # it trained: a resume continues it
    (rec,) = host_runs("h100-a", {"now": 2000.0, "runs": [raw]}).runs
    assert not rec.failed_at_start and explain(rec).next.startswith("pippa resume")


def test_a_run_that_moved_shows_where_it_went() -> None:
    from pippa_ops.runs.records.listing import host_runs

    raw = {
        "run_id": "20261126-000000-tiny-ab12",
        "meta": {"session": "s", "recipe": "tiny"},
        "ctime": 1.0,
        "exit_code": "130",
        "stop_requested": "2",
        "started": "1",
        "moved_to": "h100-b",
    }
    (rec,) = host_runs("h100-a", {"now": 10.0, "sessions": "", "runs": [raw]}).runs
    assert (rec.state, rec.state_text) == ("moved", "moved to h100-b")


def test_ps_says_a_stall_in_its_own_words() -> None:
    from pippa_ops.runs.records.listing import host_runs

    stalled = {"attempt": 1, "class": "stalled", "reason": "no new metrics line for 15m"}
    doc = {"max_attempts": 1, "attempts": [stalled]}
    raw = {
        "run_id": "20261126-000000-tiny-ab12",
        "meta": {"session": "s", "recipe": "tiny"},
        "ctime": 1.0,
        "exit_code": "130",
        "started": "1",
        "attempts": doc,
    }
    (rec,) = host_runs("h", {"now": 10.0, "sessions": "", "runs": [raw]}).runs
    assert rec.state_text == "stalled (no new metrics line for 15m)"


def test_a_slurm_jobs_output_decides_its_class() -> None:
    from pippa_ops.errors import BadSetting
    from pippa_ops.runs.launching.restart import RestartFlags
    from pippa_ops.runs.launching.schedulers import slurm_retries

    tail = [
        "step 3/8 loss 1.2",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 79.10 GiB of which 1.06 GiB is free.",
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    rec = _rec(
        state="failed", exit_code=1, error="srun: error: node1: task 0: Exited with exit code 1", job_id="41"
    )
    assert explain(rec).attempts[0].cls == "crash"  # the listing's error line alone
    assert explain(rec, tail).attempts[0].cls == "oom"  # the job's output read
    assert slurm_retries("c", RestartFlags(retry=2), has_cmd=False) == 2
    for flags, named in (
        (RestartFlags(retry=1, stall_timeout="20m"), "--stall-timeout"),
        (RestartFlags(failover=("b",)), "--failover"),
    ):
        try:
            slurm_retries("c", flags, has_cmd=False)
        except BadSetting as e:
            assert named in str(e) and "\n" not in str(e)
        else:
            raise AssertionError(f"{named} was taken on a SLURM host")


def test_a_gpu_fault_of_a_pinned_run_offers_the_pinned_gpus_left() -> None:
    fault = {
        "attempt": 1,
        "class": "gpu-fault",
        "reason": "Xid 79 on GPU PCI:0000:3b:00",
        "exit_code": 137,
        "gpu_index": 1,
    }
    pinned = _rec(
        state="failed",
        exit_code=137,
        command="x --set 'launch.gpus=\"0-3\"'",
        attempts_doc={"attempts": [fault]},
    )
    assert explain(pinned).next.startswith("pippa resume 20261126-1-tiny-ab12 --host h100-a --gpus 0,2,3")
    unpinned = _rec(state="failed", exit_code=137, attempts_doc={"attempts": [fault]})
    assert "--on OTHER_HOST" in explain(unpinned).next and "--gpus" not in explain(unpinned).next


def test_an_infrastructure_retry_says_its_attempt_and_backoff_as_the_log_does(capsys) -> None:
    """--retry 0 (budget 1) and a stall granted a retry that spends none: the log says attempt 1/2 and 2/2,
    so ps says so during the backoff (not plain running) and why says 1/2 (not 1/1)."""
    from pippa_ops.cli.recover_cmd import render_recover
    from pippa_ops.runs.launching.recover import Recovered, RecoverResult
    from pippa_ops.runs.records.listing import host_runs

    stalled = {**STALLED, "decision": {"retry": True, "spends": "infra", "why": "infrastructure retry 1/3"}}
    doc = {"max_attempts": 1, "attempts": [stalled], "next_at": 2027.0}
    meta = {"recipe": "tiny", "command": "python -m training_core.launch tiny", "session": "s"}
    raw = {
        "run_id": "20261126-120000-tiny-ab12",
        "meta": meta,
        "exit_code": None,
        "tmux_session": "$1@1000",
        "started": "1990",
        "attempts": doc,
    }
    sessions = "s|1000|0|1|$1\n"  # the session is alive: the supervisor waits out its backoff
    (rec,) = host_runs("h100-a", {"now": 2000.0, "sessions": sessions, "runs": [raw]}).runs
    assert rec.state == "running" and rec.state_text == "running (attempt 2/2 in 27s)", rec
    why = explain(rec)
    assert "attempt 1/2  stalled (no new metrics line for 15s)" in "\n".join(render(why, rec.attempts_of))
    render_recover(
        RecoverResult(
            "h100-a", (Recovered("r1", "s", 2, 2, None), Recovered("r2", "t", 2, 3, "checkpoint-40")), ()
        )
    )
    out = capsys.readouterr().out
    assert "resumed r1 in session s (attempt 2/2, no checkpoint: from step 0)" in out
    assert "resumed r2 in session t (attempt 2/3, from checkpoint-40)" in out and "with --resume" not in out


def test_a_run_ended_by_a_full_disk_before_its_first_step_is_told_what_to_free_and_to_resume() -> None:
    from pippa_ops.runs.records.listing import host_runs

    reason = "writing /data/pippa/runs/r/metrics.jsonl: No space left on device (0 B free on /data)"
    full = {"attempt": 1, "exit_code": 1, "outcome": "failed", "class": "disk-full", "reason": reason}
    raw = {
        "run_id": "20261126-120000-tiny-ab12",
        "meta": {"recipe": "tiny", "command": "python -m training_core.launch tiny", "session": "s"},
        "exit_code": "1",
        "steps": [],
        "end": {
            "type": "end",
            "status": "failed",
            "step": 0,
            "at_start": True,
            "error": "disk full: " + reason,
        },
        "attempts": {"max_attempts": 1, "attempts": [full]},
    }
    (rec,) = host_runs("h100-a", {"now": 2000.0, "runs": [raw]}).runs
    assert rec.failed_at_start and rec.attempts_doc is not None
    assert explain(rec).next == (
        "free space on h100-a (0 B free on /data; it was writing /data/pippa/runs/r/metrics.jsonl): "
        "ended runs (pippa prune --older-than 7d --host h100-a, pippa rm RUN), "
        "fewer checkpoints (checkpoint.keep); then pippa resume 20261126-120000-tiny-ab12 --host h100-a"
    )
