"""The supervisor's readers of an attempt's facts (pippa_agent.attempt_facts) on real files and the
real kernel interfaces of this machine."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pippa_agent import attempt_facts as af
from pippa_contract import failures as fc


def _metrics(path: Path, *records: dict[str, object]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_step_times_are_this_attempts_and_the_batch_is_the_newest_headers(tmp_path: Path) -> None:
    m = tmp_path / "metrics.jsonl"
    train = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
    _metrics(
        m,
        {"type": "header", "config": {"train": train}, "time": 0.0},
        *({"type": "step", "step": i, "time": 100.0 + i} for i in range(1, 4)),
        {
            "type": "header",
            "config": {
                "train": {**train, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
            },
            "time": 200.0,
        },
        *({"type": "step", "step": i, "time": 200.0 + 2 * i} for i in range(3, 6)),
    )
    times, _ = af.attempt_records(str(m), 150.0)
    assert times == [206.0, 208.0, 210.0]
    assert af.batch_of(str(m)) == (4, 2)
    assert af.stall_threshold(str(m), 150.0, None) == 300.0  # the floor: 2 s steps
    assert af.stall_threshold(str(m), 1e12, None) is None  # no step yet in this attempt
    assert af.stall_threshold(str(m), 0.0, "off") is None
    nested = {"type": "header", "config": {"recipe": "tiny", "config": {"train": train}}, "time": 300.0}
    with m.open("a") as f:
        f.write(json.dumps(nested) + "\n")
    assert af.batch_of(str(m)) == (8, 1)  # training_core's header nests the resolved config


def test_the_log_tail_starts_at_the_attempts_offset(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("attempt 1 line\nTraceback (most recent call last):\n")
    start = log.stat().st_size
    with log.open("a") as f:
        f.write("attempt 2 line\n")
    assert af.log_tail(str(log), start) == ["attempt 2 line"]


def test_kernel_and_cgroup_readers_answer_or_say_nothing() -> None:
    future = af.kernel_lines(time.time() + 3600)
    assert future == []  # nothing is logged in the future, whichever reader answered
    kills = af.cgroup_oom_kills()
    assert kills is None or kills >= 0


def test_a_decision_counts_the_earlier_attempts_classes() -> None:
    doc = {"attempts": [{"class": "lost"}, {"class": "crash"}, {}]}
    policy = {"max_attempts": 2}
    d = af.decide(doc, fc.Verdict("crash", "x"), policy, None)
    assert not d.retry  # two crashes with --retry 1; the lost one did not count
    assert af.decide({"attempts": [{"class": "lost"}, {}]}, fc.Verdict("crash", "x"), policy, None).retry


def test_a_resume_keeps_the_time_the_run_already_ran(tmp_path: Path) -> None:
    import os

    from pippa_agent.host import reopen_run_dir
    from pippa_ops.runs.records.listing import host_runs

    d = tmp_path / "20261126-000000-tiny-ab12"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"session": "s", "recipe": "tiny", "past_s": 50.0}))
    (d / "started").write_text("1000\n")
    (d / "exit_code").write_text("1\n")
    os.utime(d / "exit_code", (1100, 1100))  # this stretch ran 100 s
    reopen_run_dir(str(d), "s", 2000.0)
    meta = json.loads((d / "run.json").read_text())
    assert meta["past_s"] == 150.0 and not (d / "exit_code").exists()
    raw = {"run_id": d.name, "meta": meta, "ctime": 2000.0, "started": "2000", "exit_code": "0"}
    raw["ended"] = 2010.0
    (rec,) = host_runs("h", {"now": 2010.0, "sessions": "", "runs": [raw]}).runs
    assert rec.duration_s == 160.0  # 150 before the resume, 10 since
    # STARTED says when the run began, as DURATION counts every stretch (started is the last stretch's)
    assert (rec.started, rec.began, meta["first_started"]) == (2000.0, 1000.0, 1000.0)
    reopen_run_dir(str(d), "s", 3000.0)  # a second resume keeps the first start
    assert json.loads((d / "run.json").read_text())["first_started"] == 1000.0
