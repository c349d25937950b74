"""A host panel's first line: reachable or not (and why), then its last `pippa doctor` verdict and age."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from rich.text import Text

from pippa_contract.termsafe import escape
from pippa_ops.monitor.state import HostState

VERDICT_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor_text(h: HostState, now: float | None = None) -> Text:
    """`` · doctor fail 3h ago``: the host's last `pippa doctor` verdict and its age; empty without one."""
    if h.doctor is None:
        return Text("")
    from pippa_ops.doctor import age

    verdict, when = h.doctor, h.doctor_time
    ago = "" if when is None else f" {age(max(0.0, (now if now is not None else time.time()) - when))} ago"
    style = VERDICT_STYLE.get(verdict, "")
    return Text.assemble((" · doctor ", "dim"), (escape(verdict), style), (ago, "dim"))


def stop_line(h: HostState, now: float | None = None) -> Text:
    """`` · stop armed (done): runs in 4m12s, `pippa keep` cancels`` or `` · stop on done, idle:1800``:
    the host's stop command as `pippa hosts` says it, an armed stop's countdown from when it was read;
    empty for a host without one."""
    stop = h.stop
    if not stop or not stop.get("when"):
        return Text("")
    from pippa_ops.provision.alerts import stop_text

    left, armed = stop.get("in_s"), isinstance(stop.get("armed"), dict)
    if armed and isinstance(left, int | float) and h.stop_read is not None:
        stop = {**stop, "in_s": left - max(0.0, (now if now is not None else time.time()) - h.stop_read)}
    return Text.assemble((" · ", "dim"), (stop_text(stop), "bold yellow" if armed else "dim"))


def status_line(h: HostState, now: float | None = None) -> Text:
    """Reachable or not, and why; plainly; then the last doctor verdict and the stop command."""
    line = _link_line(h)
    if h.doctor is None and not h.stop:
        return line
    return Text.assemble(line, doctor_text(h, now), stop_line(h, now))


def _link_line(h: HostState) -> Text:
    if h.link == "down":
        retry = f", retrying in {h.retry_in_s:.0f}s" if h.retry_in_s is not None else ""
        return Text(f"✗ unreachable ({escape(h.reason or 'unknown')}){retry}", style="bold red")
    if h.link == "connecting":
        return Text("… connecting", style="yellow")
    if h.gpus is None:
        return Text("● up, waiting for nvidia-smi", style="green")
    if not h.gpus:
        return Text(f"● up, {h.gpu_note or 'no GPU'}", style="green")
    return Text(f"● up, {len(h.gpus)} GPU{'s' if len(h.gpus) > 1 else ''}", style="green")


def short_state(h: HostState) -> str:
    """``up``, ``up, 2 running``, ``down``, ``connecting``: a host in a few characters."""
    if h.link in ("down", "connecting"):
        return "unreachable" if h.link == "down" else "connecting"
    running = sum(1 for r in h.runs if r.state.startswith("running"))
    return f"up, {running} running" if running else "up"


def hosts_line(hosts: Sequence[str], states: Mapping[str, HostState]) -> str:
    """``gpu-8 up, 1 running · local up``: the header's line of every host, where there are several (the
    panels may not all fit a small terminal: at 80x24 an 8-GPU host's panel fills the hosts' half)."""
    if len(hosts) < 2:
        return ""
    return " · ".join(f"{escape(h)} {short_state(states[h])}" for h in hosts if h in states)
