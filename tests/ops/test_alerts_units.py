"""The pure parts of alerts: cost, GPU share, durations, the idle state machine, messages, redaction, the
settings of a host entry, and the shell lines (no host needed)."""

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
from pippa_contract import alerts
from pippa_ops.alerts.commands import program_command, run_end_line
from pippa_ops.alerts.settings import alert_settings, stop_config
from pippa_ops.errors import UsageError
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching.script import Job, render_cmd_sh
from pippa_ops.runs.records.cost import money, priced
from pippa_ops.runs.records.listing import HostRuns, RunRecord


def test_cost_is_elapsed_times_rate_times_share_and_none_without_a_rate() -> None:
    assert alerts.cost_so_far(3600, 24.0, None, None, None) == pytest.approx(24.0)
    assert alerts.cost_so_far(1800, 24.0, None, 4, 8) == pytest.approx(6.0)  # half the GPUs, half the hour
    assert alerts.cost_so_far(3600, None, 2.5, 3, None) == pytest.approx(7.5)
    assert alerts.cost_so_far(3600, None, 2.5, None, 8) == pytest.approx(20.0)  # all of the host's GPUs
    assert alerts.cost_so_far(3600, None, None, 1, 8) is None, "no rate: no cost, not zero"
    assert alerts.cost_so_far(3600, 24.0, None, 4, None) is None, "a share of an unknown count is unknown"
    assert alerts.cost_so_far(None, 24.0, None, None, None) is None


def test_run_gpus_reads_the_launch_gpus_setting_of_the_recorded_command() -> None:
    assert alerts.run_gpus("python -m training_core.launch x --run-dir d --set 'launch.gpus=\"0-3\"'") == 4
    assert alerts.run_gpus("python -m x --set launch.gpus=0,2 --set train.max_steps=3") == 2
    assert alerts.run_gpus("python -m x --set train.max_steps=3") is None
    assert alerts.run_gpus("sh -c 'sleep 1' --set launch.gpus=zero") is None
    assert alerts.run_gpus("echo 'unbalanced") is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("20m", 1200), ("90s", 90), ("1h30m", 5400), ("45", 45), ("2.5s", 2.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert alerts.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "20 minutes", "-5m", "1d"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        alerts.parse_duration(text)


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


def test_message_lists_every_known_field_one_per_line() -> None:
    event = {
        "state": "failed",
        "host": "h1",
        "run_id": "r-1",
        "recipe": "overfit",
        "step": 7,
        "total_steps": 10,
        "reason": "ValueError: x",
        "elapsed_s": 3725,
        "cost": 1.234,
        "currency": "EUR",
        "wandb": "https://wandb.ai/e/p/runs/x",
        "look": "pippa logs r-1 --host h1",
    }
    title, body, kind = alerts.message(event)
    assert (title, kind) == ("pippa: failed r-1 on h1", "failure")
    assert body.splitlines() == [
        "host: h1",
        "run: r-1",
        "recipe: overfit",
        "state: failed",
        "step: 7/10",
        "reason: ValueError: x",
        "elapsed: 1h02m",
        "cost so far: €1.23",
        "W&B: https://wandb.ai/e/p/runs/x",
        "look: pippa logs r-1 --host h1",
    ]


def test_a_messages_host_strings_carry_no_escape_sequence_or_extra_line() -> None:
    """A log line holding OSC 52 (clipboard), OSC 0 (title) and CSI 2J, or a newline that would forge a
    field, arrives in the message escaped, one field a line."""
    reason = "boom \x1b]52;c;aGk=\x07\x1b]0;owned\x07\x1b[2J\nstate: finished"
    title, body, _ = alerts.message(
        {"state": "failed", "host": "h\x1b[31m1", "run_id": "r-1", "recipe": "x\ry", "reason": reason}
    )
    assert "\x1b" not in title + body and "\r" not in body and "\x07" not in body
    assert title == "pippa: failed r-1 on h\\x1b[31m1"
    shown = "reason: boom \\x1b]52;c;aGk=\\x07\\x1b]0;owned\\x07\\x1b[2J\\nstate: finished"
    assert body.splitlines() == ["host: h\\x1b[31m1", "run: r-1", "recipe: x\\ry", "state: failed", shown]


def test_errors_are_redacted_of_every_part_of_the_target() -> None:
    target = "slack://TokenA1/TokenB2/TokenC3 json://user:pw-9f8e@10.0.0.1:8080/hook/abcdef"
    line = "Failed to send to slack://TokenA1/TokenB2/TokenC3 (TokenB2) and hook/abcdef at 10.0.0.1: pw-9f8e"
    out = alerts.redact(line, target)
    for secret in ("TokenA1", "TokenB2", "TokenC3", "abcdef", "pw-9f8e"):
        assert secret not in out
    assert out.startswith("Failed to send to ***")


def test_messages_are_redacted_of_every_secret_value_but_keep_addresses_and_numbers() -> None:
    values = {"PIPPA_NOTIFY": "json://10.0.0.1:8080/hook/tok-abc123", "HF_TOKEN": "hf_Zq9", "K": "ab"}
    text = "step 8080/9000 at 10.0.0.1: sent json://10.0.0.1:8080/hook/tok-abc123 (tok-abc123) hf_Zq9 ab"
    assert alerts.redact_secrets(text, values) == "step 8080/9000 at 10.0.0.1: sent *** (***) *** ab"


def test_settings_are_validated_where_the_inventory_is_read() -> None:
    ok = alert_settings({"idle_alert": "20m", "cost_per_gpu_hour": 2}, "f: hosts.a")
    assert ok == {
        "idle_alert": "20m",
        "idle_threshold": 5.0,
        "cost_per_hour": None,
        "cost_per_gpu_hour": 2.0,
        "currency": "$",
        "heartbeat_every": None,
        "heartbeat": None,
        "stop": None,
        "stop_when": (),
        "stop_notice": None,
        "daily_budget": None,
    }
    for bad in (
        {"idle_alert": "soon"},
        {"idle_alert": 20},
        {"idle_threshold": 120},
        {"cost_per_hour": -1},
        {"cost_per_hour": True},
        {"cost_per_hour": 1, "cost_per_gpu_hour": 1},
        {"currency": "dollars"},
        {"currency": 1},
        {"heartbeat_every": "often"},
        {"heartbeat_every": 60},
        {"heartbeat": "sometimes"},
        {"stop_when": ["done"]},
        {"stop": "x", "stop_when": ["soon"]},
        {"stop": "x", "stop_when": ["idle:later"]},
        {"stop": "a\nb"},
        {"stop": "x", "stop_notice": "1 week"},
        {"stop": "x", "stop_when": "done"},
        {"daily_budget": 100},
        {"daily_budget": 0, "cost_per_hour": 1},
        {"daily_budget": "lots", "cost_per_hour": 1},
    ):
        with pytest.raises(UsageError):
            alert_settings(bad, "f: hosts.a")
    assert HostSpec(name="x", idle_alert="1h30m").idle_alert_s == 5400
    assert HostSpec(name="x", heartbeat_every="2s").heartbeat_every_s == 2.0
    armed = alert_settings({"stop": "sudo shutdown -h +1", "stop_when": ["done", "idle:30m"]}, "f: hosts.a")
    assert stop_config(armed["stop"], armed["stop_when"], "0s") == {
        "stop_command": "sudo shutdown -h +1",
        "stop_when": ["done", "idle:1800"],
        "stop_notice_s": 0.0,
    }


def test_a_cost_reads_as_money_in_the_hosts_currency() -> None:
    assert [money(0.031, c) for c in (None, "$", "USD", "EUR", "€", "CHF")] == [
        "$0.03",
        "$0.03",
        "$0.03",
        "€0.03",
        "€0.03",
        "CHF 0.03",
    ]
    assert money(None, "EUR") == "-"


def test_cmd_sh_tells_the_host_in_the_background_after_recording_the_exit_code() -> None:
    script = render_cmd_sh(Job("r-1", None, "true", None), "~/pippa", {})
    lines = script.splitlines()
    hook = lines.index(run_end_line())
    assert "exit_code" in lines[hook - 1] and lines[hook + 1] == "exit 0"
    prog, config = '"$RUN_DIR/agent.pyz"', '"$HOME"/.config/pippa/alerts/config.json'
    assert run_end_line() == (
        f"[ -f {config} ] && [ -f {prog} ] && python3 -S -I {prog} alerts event "
        '--run-dir "$RUN_DIR" --detach >/dev/null 2>&1 || :'
    )
    assert program_command("watch-stop").endswith("exit 3; fi") and "'" not in program_command("status")[:60]


def test_priced_reads_the_host_gpu_count_only_when_a_share_needs_it() -> None:
    asked: list[int] = []

    def gpus() -> int:
        asked.append(1)
        return 8

    rec = RunRecord(
        host="h", run_id="r", session="s", recipe=None, command="true", state="finished", duration_s=7200
    )
    runs = HostRuns(host="h", now=0.0, runs=(rec,))
    assert priced(HostSpec(name="h", cost_per_hour=3.0), runs, gpus).runs[0].cost == 6.0 and not asked
    half = RunRecord(**{**rec.__dict__, "command": "x --set launch.gpus=0-3"})
    out = priced(HostSpec(name="h", cost_per_hour=3.0), HostRuns(host="h", now=0.0, runs=(rec, half)), gpus)
    assert [r.cost for r in out.runs] == [6.0, 3.0] and asked == [1]
    assert priced(HostSpec(name="h"), runs, gpus).runs[0].cost is None


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
