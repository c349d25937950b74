"""The host's alerts program (pippa_agent.alerts), on this machine: the idle-GPU watch as a state
machine, a run's event read from its run directory, ``watch-ensure``, the deliveries log under many
writers, one reason line for ps, alerts and attempts; it is Python 3.8 and standard library only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostprogram import ROOT, install, source_env

from pippa_agent.alerts import events, watch


def test_idle_watch_alerts_once_after_the_period_and_once_when_it_ends() -> None:
    w = watch.IdleWatch(idle_s=60, threshold=5)
    assert w.sample(0, [0.0, 3.0], None) is None
    assert w.sample(59, [0.0, 3.0], None) is None
    assert w.sample(60, [0.0, 3.0], None) == "idle"
    assert w.sample(120, [0.0, 0.0], None) is None, "once per idle period"
    assert w.sample(121, [0.0, 50.0], None) == "busy"
    assert w.sample(122, [0.0, 0.0], None) is None and w.idle_since == 122


def test_a_run_or_one_busy_gpu_or_no_gpus_is_not_idle() -> None:
    w = watch.IdleWatch(idle_s=10, threshold=5)
    assert w.sample(0, [0.0, 0.0], "run-1") is None and w.idle_since is None
    assert w.sample(100, [0.0, 6.0], None) is None and w.idle_since is None
    assert w.sample(200, None, None) is None and w.idle_since is None  # no nvidia-smi: nothing to say


def test_a_failed_gpu_reading_neither_ends_an_idle_period_nor_alerts_again() -> None:
    w = watch.IdleWatch(idle_s=10, threshold=5)
    seen = [w.sample(t, u, None) for t, u in ((0, [0.0]), (10, [0.0]), (20, None), (30, [0.0]), (40, [0.0]))]
    assert seen == [None, "idle", None, None, None] and w.idle_since == 0 and w.alerted
    assert w.sample(50, [90.0], None) == "busy"


def test_the_host_program_is_python38_and_standard_library_only(tmp_path: Path) -> None:
    for package in ("alerts", "supervise"):
        for path in (ROOT / "pippa_agent" / package).glob("*.py"):
            ast.parse(path.read_text(), feature_version=(3, 8))
    code = (
        "import sys, pippa_agent.alerts.main, pippa_agent.supervise.supervisor;"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('pippa_ops', 'apprise'))))"
    )
    env = source_env(tmp_path)
    p = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert p.stdout.strip() == ""


def test_run_event_reads_the_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    alerts = tmp_path / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    (alerts / "config.json").write_text(json.dumps({"host": "h9", "cost_per_hour": 10.0, "gpus": 4}))
    d = tmp_path / "runs" / "r-2"
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps({"host": "h9", "recipe": "tiny", "command": "x --set launch.gpus=0,1"})
    )
    (d / "started").write_text("1000\n")
    # the header as the trainer writes it: its config is Resolved.as_dict(), the dataclasses under "config"
    plan = {"recipe": "tiny", "recipe_path": "/h/recipes/tiny.toml", "config": {"train": {"max_steps": 50}}}
    header = {"type": "header", "config": plan, "wandb": {"url": "https://w/x"}}
    end = {"type": "end", "status": "failed", "step": 12, "error": "CUDA out of memory"}
    (d / "metrics.jsonl").write_text(
        "\n".join(json.dumps(x) for x in (header, {"type": "step", "step": 12}, end)) + "\n"
    )
    (d / "exit_code").write_text("1\n")
    os.utime(d / "exit_code", (1000 + 1800, 1000 + 1800))
    ev = events.run_event(str(d))
    assert (ev["state"], ev["step"], ev["total_steps"], ev["reason"]) == (
        "failed",
        12,
        50,
        "CUDA out of memory",
    )
    assert (ev["elapsed_s"], ev["cost"], ev["wandb"]) == (1800, pytest.approx(2.5), "https://w/x")
    assert ev["look"] == "pippa logs r-2 --host h9"
    done = (header, {"type": "step", "step": 50})
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in done))
    (d / "exit_code").write_text("0\n")
    from pippa_contract.alerts import message

    assert "step: 50/50" in message(events.run_event(str(d)))[1]  # its plan, not 50/?


def test_a_failed_starts_alert_says_what_to_fix_and_the_rerun_never_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    d = tmp_path / "runs" / "r-3"
    d.mkdir(parents=True)
    command = "/h/.venv/bin/python -m training_core.launch tiny --run-dir /h/runs/r-3 --set train.max_steps=9"
    (d / "run.json").write_text(json.dumps({"host": "h9", "recipe": "tiny", "command": command}))
    why = "OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    lines = (
        {"type": "header", "config": {}},
        {"type": "end", "status": "failed", "step": 0, "error": why, "at_start": True},
    )
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (d / "exit_code").write_text("1\n")
    look = events.run_event(str(d))["look"]
    assert look.startswith("fix network or Hub cache: give the host access to huggingface.co"), look
    assert look.endswith("then pippa run tiny --host h9 --set train.max_steps=9") and "resume" not in look


SLOW_SMI = """#!/bin/sh
# an nvidia-smi that answers only once the test creates $HOME/release (a first sample can take 20 s)
i=0
while [ ! -e "$HOME/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
echo 0
"""


def test_watch_ensure_names_the_new_watcher_before_its_first_sample_not_a_stale_pid(tmp_path: Path) -> None:
    """watch.json is written as soon as the watcher holds its lock, so watch-ensure answers while the
    first nvidia-smi is still out, and never with the pid a killed watcher left behind."""
    home = tmp_path / "home"
    alerts = home / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    (alerts / "config.json").write_text(json.dumps({"idle_alert_s": 600, "remote_dir": str(tmp_path)}))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that is no watcher any more
    (alerts / "watch.json").write_text(json.dumps({"pid": gone.pid, "started": 0}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(SLOW_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    prog = [sys.executable, "-S", "-I", str(install(home)), "alerts"]
    try:
        p = subprocess.run([*prog, "watch-ensure"], env=env, capture_output=True, text=True, timeout=60)
        pid = json.loads(p.stdout)["watcher"]
        assert pid != gone.pid and watch.is_watcher(pid), p.stdout
        assert "sample_time" not in json.loads((alerts / "watch.json").read_text()), "no sample yet"
        again = subprocess.run([*prog, "watch-ensure"], env=env, capture_output=True, text=True, timeout=60)
        assert json.loads(again.stdout)["watcher"] == pid, "one watcher per host user"
    finally:
        (home / "release").touch()
        stop = subprocess.run([*prog, "watch-stop"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(stop.stdout)["stopped"] == pid


def test_deliveries_log_stays_whole_json_lines_when_many_processes_trim_it_at_once(tmp_path: Path) -> None:
    """Runs ending together each log and trim deliveries.jsonl: no torn or lost line, and it stays bounded."""
    alerts = tmp_path / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    code = (
        "import sys; import pippa_agent.alerts.deliver as ha;"
        "ha.DELIVERIES_MAX_BYTES = 3000;"
        "[ha.log_delivery({'state': 'failed', 'run_id': f'r-{sys.argv[1]}-{i}'}, False, 'e' * 40)"
        " for i in range(60)]"
    )
    env = source_env(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-S", "-c", code, str(n)], env=env) for n in range(6)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    lines = (alerts / "deliveries.jsonl").read_text().splitlines()
    assert [json.loads(line)["state"] for line in lines] == ["failed"] * len(lines)
    assert len("\n".join(lines)) <= 3000 + 200
    assert not list(alerts.glob("*.tmp"))


def test_a_slurm_runs_alert_gives_the_reason_ps_shows_not_sruns_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reason-line rule (pippa_contract.runfacts.reason_line) for ps, the alerts and the supervisor:
    srun's closing line only repeats the exit status, the job's own error says why."""
    from pippa_agent.supervise.files import reason_line as attempt_reason
    from pippa_contract.runfacts import error_line

    monkeypatch.setenv("HOME", str(tmp_path))
    d = tmp_path / "runs" / "r-slurm"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"host": "cluster", "command": "python -m x"}))
    (d / "output.log").write_text(
        "step 1/8\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
        "srun: error: node7: task 0: Exited with exit code 1\n"
    )
    (d / "exit_code").write_text("1\n")
    job_line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert error_line(str(d / "output.log")) == job_line  # what ps shows
    assert events.run_event(str(d))["reason"] == job_line  # what the alert says
    assert attempt_reason(str(d / "output.log"), 0) == job_line  # what an attempt records
