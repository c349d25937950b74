"""The host entry's alert and cost settings, checked where the inventory is read (hosts.inventory).

``idle_alert = "20m"`` and ``idle_threshold = 5`` (% utilization) turn on the host's idle-GPU watcher;
``cost_per_hour`` (the whole host) or ``cost_per_gpu_hour`` give runs and idle time a price, in
``currency`` (an ISO code such as ``"EUR"`` or a symbol; default ``"$"``). ``heartbeat_every = "60s"``
is how often the host pings PIPPA_HEARTBEAT while a run makes progress, and ``heartbeat = "always"``
pings while no run goes on too (pippa_agent.alerts.heartbeat).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pippa_contract.alerts import DEFAULT_CURRENCY, DEFAULT_IDLE_THRESHOLD, parse_duration
from pippa_ops.errors import UsageError

FIELDS = (
    "idle_alert",
    "idle_threshold",
    "cost_per_hour",
    "cost_per_gpu_hour",
    "currency",
    "heartbeat_every",
    "heartbeat",
    "stop",
    "stop_when",
    "stop_notice",
    "daily_budget",
)
TRIGGERS = ("done", "stalled", "budget", "idle:<duration>")  # stop_when's words (pippa_agent.alerts.stopper)
_CURRENCY_RE = re.compile(r"^(?:[A-Z]{3}|[^\sA-Za-z0-9]{1,3})$")  # "USD", "EUR", or a symbol: "$", "€"


def alert_settings(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The HostSpec fields of FIELDS from one merged inventory entry, validated."""

    def number(key: str) -> float | None:
        value = entry.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise UsageError(f"{where}.{key} must be a number >= 0")
        return float(value)

    idle = entry.get("idle_alert")
    if idle is not None:
        if not isinstance(idle, str):
            raise UsageError(f'{where}.idle_alert must be a duration string like "20m"')
        try:
            if parse_duration(idle) <= 0:
                raise ValueError("zero")
        except ValueError as e:
            raise UsageError(
                f'{where}.idle_alert must be a duration like "20m" or "90s", not {idle!r}'
            ) from e
    threshold = number("idle_threshold")
    if threshold is not None and threshold > 100:
        raise UsageError(f"{where}.idle_threshold is a % of utilization (0-100)")
    per_host, per_gpu = number("cost_per_hour"), number("cost_per_gpu_hour")
    if per_host is not None and per_gpu is not None:
        raise UsageError(f"{where}: set cost_per_hour or cost_per_gpu_hour, not both")
    currency = entry.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not _CURRENCY_RE.match(currency):
        raise UsageError(f'{where}.currency must be an ISO code like "USD" or a symbol like "$"')
    every = entry.get("heartbeat_every")
    if every is not None:
        try:
            if not isinstance(every, str) or parse_duration(every) <= 0:
                raise ValueError("zero")
        except ValueError as e:
            raise UsageError(
                f'{where}.heartbeat_every must be a duration like "60s" or "1m", not {every!r}'
            ) from e
    beat = entry.get("heartbeat")
    if beat is not None and beat != "always":
        raise UsageError(f'{where}.heartbeat can only be "always" (pings with no run too), not {beat!r}')
    daily = number("daily_budget")
    if daily is not None and (daily <= 0 or (per_host is None and per_gpu is None)):
        raise UsageError(
            f"{where}.daily_budget needs an amount > 0 and a price (cost_per_hour or cost_per_gpu_hour)"
        )
    return {
        **stop_settings(entry, where),
        "daily_budget": daily,
        "heartbeat_every": every,
        "heartbeat": beat,
        "idle_alert": idle,
        "idle_threshold": DEFAULT_IDLE_THRESHOLD if threshold is None else threshold,
        "cost_per_hour": per_host,
        "cost_per_gpu_hour": per_gpu,
        "currency": currency,
    }


def _duration(value: object, where: str, example: str, zero: bool = False) -> float:
    try:
        if not isinstance(value, str):
            raise ValueError("not text")
        seconds = parse_duration(value)
        if seconds < 0 or (seconds == 0 and not zero):
            raise ValueError("zero")
        return seconds
    except ValueError as e:
        raise UsageError(f"{where} must be a duration like {example!r}, not {value!r}") from e


def stop_settings(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``stop = "<command>"``, ``stop_when = ["done", "stalled", "idle:30m"]``, ``stop_notice = "5m"``:
    the host's watcher runs the command once per trigger (pippa_agent.alerts.stopper)."""
    stop, when, notice = entry.get("stop"), entry.get("stop_when"), entry.get("stop_notice")
    one_line = isinstance(stop, str) and stop.strip() and "\n" not in stop and len(stop) <= 500
    if stop is not None and not one_line:
        raise UsageError(f'{where}.stop must be one command line, e.g. "runpodctl stop pod $RUNPOD_POD_ID"')
    words: list[str] = []
    if when is not None:
        if not isinstance(when, list) or not all(isinstance(w, str) for w in when):
            raise UsageError(f'{where}.stop_when must be a list like ["done", "idle:30m"]')
        for w in when:
            if w.startswith("idle:"):
                _duration(w[5:], f"{where}.stop_when's idle", "idle:30m")
            elif w not in ("done", "stalled", "budget"):
                raise UsageError(f"{where}.stop_when: unknown {w!r} (use {', '.join(TRIGGERS)})")
            words.append(w)
    if words and stop is None:
        raise UsageError(f'{where}.stop_when needs stop = "<command>" (what to run)')
    if notice is not None:
        _duration(notice, f"{where}.stop_notice", "5m", zero=True)
    return {"stop": stop, "stop_when": tuple(words), "stop_notice": notice}


def stop_config(stop: str | None, when: tuple[str, ...], notice: str | None) -> dict[str, Any]:
    """config.json's stop keys: the command, the triggers (an idle period in seconds), the notice."""
    if not stop or not when:
        return {"stop_command": None, "stop_when": [], "stop_notice_s": None}
    words = [f"idle:{parse_duration(w[5:]):g}" if w.startswith("idle:") else w for w in when]
    return {
        "stop_command": stop,
        "stop_when": words,
        "stop_notice_s": parse_duration(notice) if notice else None,
    }
