"""The pure parts of alerts on the laptop and in the contract: cost, GPU share, durations, messages,
redaction, the settings of a host entry, and the shell lines (no host needed). The host's alerts
program: tests/agent/test_host_alerts.py."""

from __future__ import annotations

import pytest

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


def test_the_host_config_carries_the_entry_env_for_the_watcher() -> None:
    from pippa_ops.provision.alerts import host_config

    spec = HostSpec(name="x", env={"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/data/hf"})
    assert host_config(spec, "~/pippa", 2, "python3")["env"] == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_HOME": "/data/hf",
    }
    assert host_config(HostSpec(name="y"), "~/pippa", 0, "python3")["env"] == {}
