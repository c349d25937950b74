"""The laptop's side of the host's alerts: link the host program and write its config (`pippa up`), start or
stop the host's watcher (GPU faults during runs, idle GPUs), send the test message (`pippa notify-test`),
read the status (`pippa hosts`).

Every command line here is built by a pure function from fixed words and quoted once; the target
(PIPPA_NOTIFY) never passes through: it reaches the host in the secrets file (provision.envfile), and only
the host's delivery process reads it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from pippa_contract import verbs
from pippa_contract.alerts import DEFAULT_IDLE_THRESHOLD, format_elapsed, money
from pippa_contract.alerts import TARGET as TARGET
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR, ALERTS_PROGRAM
from pippa_contract.termsafe import escape
from pippa_ops.alerts.commands import program_command
from pippa_ops.alerts.settings import stop_config
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import sh_path

SEND_TIMEOUT_S = 30.0  # the host's delivery limit (pippa_agent.alerts.deliver)


def host_config(
    spec: HostSpec, remote_dir: str, gpus: int, python: str, configured: bool = False, heartbeat: bool = False
) -> dict[str, Any]:
    """config.json beside the program: what messages say about the host, and the watcher's settings
    (``fault_watch``: alerts are configured, so GPU faults during a run are watched for)."""
    words = shlex.split(python)
    return {
        "host": spec.name,
        "remote_dir": remote_dir,
        "python": words,
        "gpus": gpus or None,
        "cost_per_hour": spec.cost_per_hour,
        "cost_per_gpu_hour": spec.cost_per_gpu_hour,
        "currency": spec.currency,
        "idle_alert_s": spec.idle_alert_s,
        "idle_threshold": spec.idle_threshold,
        "fault_watch": configured,
        "heartbeat_on": heartbeat,  # PIPPA_HEARTBEAT went to the secrets file (the URL itself stays there)
        "heartbeat_every_s": spec.heartbeat_every_s,
        "heartbeat": spec.heartbeat,
        **stop_config(spec.stop, spec.stop_when, spec.stop_notice),
        "daily_budget": spec.daily_budget,
        "env": dict(spec.env),  # the entry's env (non-secret), for the watcher as cmd.sh has it for runs
    }


@dataclass(frozen=True)
class AlertsSetup:
    """What `pippa up` reports about alerts (never the target itself)."""

    configured: bool  # PIPPA_NOTIFY went to the host's secrets file
    watcher: int | None  # the watcher's pid, None when neither alerts nor idle_alert are set
    watcher_error: str | None = None
    idle_alert: str | None = None  # the entry's setting, e.g. "20m"
    idle_threshold: float = DEFAULT_IDLE_THRESHOLD

    def to_json(self) -> dict[str, object]:
        return {"configured": self.configured, "watcher": self.watcher, "watcher_error": self.watcher_error}

    def summary(self) -> str:
        return "configured (PIPPA_NOTIFY)" if self.configured else "not configured (set PIPPA_NOTIFY in .env)"

    def watch_summary(self) -> str:
        if self.watcher_error:
            return f"not running: {self.watcher_error}"
        if self.watcher is None:
            return "off (neither PIPPA_NOTIFY nor idle_alert set)"
        faults = "GPU faults during runs" if self.configured else ""
        if self.idle_alert is None:
            return f"pid {self.watcher}: {faults}"
        idle = f"idle after {self.idle_alert} under {self.idle_threshold:g}% utilization"
        return f"pid {self.watcher}: {', '.join(w for w in (faults, idle) if w)}"


def install(
    transport: Transport,
    spec: HostSpec,
    *,
    remote_dir: str,
    gpus: int,
    python: str,
    configured: bool,
    heartbeat: bool = False,
) -> AlertsSetup:
    """Link the host program and write its config, retire an earlier version's alerts program (its
    watcher stopped, a forwarder in its place), then start the watcher (one per host user) when alerts
    are configured (GPU faults during runs) or the entry has ``idle_alert``, else stop it."""
    base = ALERTS_DIR
    with agent_client.Session(transport) as agent:
        config = host_config(spec, remote_dir, gpus, python, configured, heartbeat)
        verbs.write_file(agent, f"{base}/{ALERTS_CONFIG}", json.dumps(config), 0o600)
        verbs.link_program(agent, ALERTS_PROGRAM, agent_client.digest(), "alerts")
    transport.run(f"chmod 700 {sh_path(base)}", timeout=30)
    transport.run(program_command("retire-legacy"), timeout=60)
    wanted = configured or bool(spec.idle_alert_s) or heartbeat or bool(spec.stop and spec.stop_when)
    wanted = wanted or spec.daily_budget is not None
    verb = "watch-ensure" if wanted else "watch-stop"
    answer = _answer(transport.run(program_command(verb), timeout=60).stdout)
    if not wanted:
        return AlertsSetup(configured=configured, watcher=None)
    pid = answer.get("watcher")
    ok = isinstance(pid, int)
    return AlertsSetup(
        configured=configured,
        watcher=pid if ok else None,
        watcher_error=None if ok else str(answer.get("error") or "no answer from the host"),
        idle_alert=spec.idle_alert,
        idle_threshold=spec.idle_threshold,
    )


@dataclass(frozen=True)
class TestResult:
    sent: bool
    configured: bool
    error: str | None
    missing: bool = False  # the host has no alerts program: `pippa up` first

    def to_json(self) -> dict[str, object]:
        return {"sent": self.sent, "configured": self.configured, "error": self.error}


def notify_test(transport: Transport) -> TestResult:
    """One test message from the host, synchronously, with the service's error when it fails."""
    r = transport.run(program_command("test"), timeout=SEND_TIMEOUT_S + 30)
    answer = _answer(r.stdout)
    if answer.get("missing"):
        return TestResult(False, False, "alerts are not installed on this host: run pippa up", missing=True)
    if not answer:
        return TestResult(False, False, (r.stderr.strip().splitlines() or ["no answer"])[-1])
    return TestResult(bool(answer.get("sent")), bool(answer.get("configured")), answer.get("error"))


def host_status(transport: Transport, timeout: float = 10.0) -> dict[str, Any] | None:
    """The host's alerts status (pippa_agent.alerts.main.status), None where alerts were never installed."""
    return status_of(transport.run(program_command("status"), timeout=timeout).stdout)


def status_of(stdout: str) -> dict[str, Any] | None:
    """What ``program_command("status")`` printed, as ``host_status`` returns it."""
    answer = _answer(stdout)
    return None if not answer or answer.get("missing") else answer


def with_rate(status: dict[str, Any] | None, spec: HostSpec) -> dict[str, Any] | None:
    """The status with the entry's rate (the inventory is what counts, not the host's copy)."""
    if status is None and not (spec.cost_per_hour is not None or spec.cost_per_gpu_hour is not None):
        return None
    return {
        **(status or {}),
        "cost_per_hour": spec.cost_per_hour,
        "cost_per_gpu_hour": spec.cost_per_gpu_hour,
        "currency": spec.currency,
    }


def status_line(status: dict[str, Any]) -> str:
    """One line for `pippa hosts`: alerts on/off, rate, idle watcher and idle time, delivery failures."""
    parts = ["alerts on" if status.get("configured") else "alerts off"]
    if status.get("heartbeat"):
        parts.append("heartbeat on")
    if status.get("cost_per_hour") is not None:
        parts.append(f"{money(status['cost_per_hour'], status.get('currency'))}/h")
    elif status.get("cost_per_gpu_hour") is not None:
        parts.append(f"{money(status['cost_per_gpu_hour'], status.get('currency'))}/GPU-h")
    if status.get("watcher"):
        idle = status.get("idle_s")
        since = f", GPUs idle {format_elapsed(idle)}" if isinstance(idle, int | float) else ""
        what = "idle watch" if status.get("idle_alert_s") else "GPU watch"
        sees = "" if status.get("nvidia_smi") else ", no nvidia-smi on its PATH"  # blind to the GPUs
        parts.append(f"{what} pid {status['watcher']}{since}{sees}")
    stop = status.get("stop")
    if isinstance(stop, dict) and stop.get("when"):
        parts.append(stop_text(stop))
    failures = status.get("failures") or 0
    last = status.get("last_failure")
    if failures and isinstance(last, dict):
        parts.append(f"alerts failed: {failures}, last: {last.get('error')}")
    return escape("; ".join(parts))  # the host's words (a delivery error): escaped


def _answer(stdout: str) -> dict[str, Any]:
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    try:
        value = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_text(stop: dict[str, Any]) -> str:
    """``stop on done, idle:1800`` or ``stop armed (done): runs in 4m12s, pippa keep H cancels``."""
    armed = stop.get("armed")
    if isinstance(armed, dict):
        left = stop.get("in_s")
        when = f"runs in {format_elapsed(left)}" if isinstance(left, int | float) and left > 0 else "due now"
        return f"stop armed ({armed.get('trigger')}): {when}, `pippa keep` cancels"
    last = stop.get("last")
    ran = f", last: {last.get('trigger')} -> {last.get('how')}" if isinstance(last, dict) else ""
    return f"stop on {', '.join(str(w) for w in stop.get('when') or [])}{ran}"
