"""What an alert says, on both sides: durations, a run's GPU count, cost so far, the message's
lines, and the redaction of secrets. The host's alerts program (pippa_agent.alerts) builds and sends
messages with these; the laptop uses the same for ``ps``'s cost and its inventory's durations."""

from __future__ import annotations

import re
import shlex

from pippa_contract.secrets import TARGET as TARGET  # re-exported: the secrets file's key of the URLs
from pippa_contract.secrets import redact as redact  # re-exported: the one redaction
from pippa_contract.secrets import redact_secrets as redact_secrets
from pippa_contract.termsafe import escape

DEFAULT_IDLE_THRESHOLD = 5.0  # % utilization under which a GPU counts as idle
DEFAULT_CURRENCY = "$"  # a host entry's `currency` when unset
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹"}  # codes shown as their symbol
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?$")
_GPU_IDS = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def parse_duration(text: str) -> float:
    """``"20m"``, ``"90s"``, ``"1h30m"``, ``"45"`` (seconds) -> seconds; ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"a duration like 20m, 90s or 1h30m, not {text!r}")
    h, mins, s = m.groups()
    return int(h or 0) * 3600.0 + int(mins or 0) * 60.0 + float(s or 0)


def gpu_ids_count(spec: str) -> int | None:
    """How many GPUs ``launch.gpus`` names (``"0-6"``, ``"0,2"``); None when it is not such a list."""
    spec = spec.strip().strip("\"'")
    if not _GPU_IDS.fullmatch(spec):
        return None
    n = 0
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) - int(lo) + 1) if hi.strip() else 1
    return n if n > 0 else None


def gpu_ids(spec: str) -> list[int] | None:
    """The GPU indices ``launch.gpus`` names (``"0-3"``: 0, 1, 2, 3); None when it is not such a list."""
    spec = spec.strip().strip("\"'")
    if not _GPU_IDS.fullmatch(spec):
        return None
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi) + 1) if hi.strip() else [int(lo)])
    return out or None


def _gpus_setting(command: str) -> str | None:
    """The value of a run command's last ``--set launch.gpus=...`` (``pippa run --gpus``); None: none."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    found = None
    for i, word in enumerate(words):
        item = words[i + 1] if word == "--set" and i + 1 < len(words) else ""
        if item.startswith("launch.gpus="):
            found = item.split("=", 1)[1]
    return found


def pinned_gpus(command: str) -> list[int] | None:
    """The GPU indices a run's command pins (its last ``--set launch.gpus=...``); None: all of them."""
    setting = _gpus_setting(command)
    return None if setting is None else gpu_ids(setting)


def healthy_gpus(command: str, faulted: int | None) -> str | None:
    """After a gpu-fault on GPU ``faulted`` of a run pinned with ``--gpus``: the pinned GPUs left
    (``"0,2,3"``) for ``pippa resume RUN --gpus``; None when the run was not pinned or none are left."""
    pinned = pinned_gpus(command)
    if not pinned or faulted is None or faulted not in pinned:
        return None
    return ",".join(str(g) for g in pinned if g != faulted) or None


def run_gpus(command: str) -> int | None:
    """The GPUs a run asked for (its ``--set launch.gpus=...``, i.e. ``pippa run --gpus``); None: all."""
    setting = _gpus_setting(command)
    return None if setting is None else gpu_ids_count(setting)


def cost_so_far(
    elapsed_s: float | None,
    cost_per_hour: float | None,
    cost_per_gpu_hour: float | None,
    run_gpus: int | None,
    host_gpus: int | None,
) -> float | None:
    """elapsed x the host's rate x the run's share of the host's GPUs (all of them without ``--gpus``).

    None where the host has no rate, or where the share needs a GPU count nobody knows: never a
    made-up zero."""
    if elapsed_s is None:
        return None
    hours = max(0.0, elapsed_s) / 3600.0
    if cost_per_gpu_hour is not None:
        n = run_gpus if run_gpus is not None else host_gpus
        return None if n is None else hours * cost_per_gpu_hour * n
    if cost_per_hour is not None:
        if run_gpus is None:
            return hours * cost_per_hour
        if not host_gpus:
            return None
        return hours * cost_per_hour * min(1.0, run_gpus / host_gpus)
    return None


def money(cost: float | None, currency: str | None) -> str:
    """A cost as pippa shows it (COST columns, messages): ``$0.03``, ``€4.80``, ``CHF 0.03`` (a code
    without a symbol here); ``-`` without a rate."""
    if cost is None:
        return "-"
    unit = currency or DEFAULT_CURRENCY
    unit = SYMBOLS.get(unit, unit)
    return f"{unit} {cost:.2f}" if unit.isalpha() else f"{unit}{cost:.2f}"


def format_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s"


def message(event: dict[str, Any]) -> tuple[str, str, str]:
    """(title, body, Apprise notify type) of an event: one ``field: value`` line per known fact. The
    host's words (its name, the run's recipe or command, the reason, a line of the run's log) reach a
    phone, a mail reader or a terminal: their control characters show escaped (``termsafe.escape``)."""
    event = {k: escape(v) if isinstance(v, str) else v for k, v in event.items()}
    state = str(event.get("state") or "event")
    host = str(event.get("host") or "?")
    what = event.get("name") or event.get("run_id") or event.get("subject") or ""
    title = f"pippa: {state} {what} on {host}" if what else f"pippa: {state} on {host}"
    lines = [f"host: {host}"]
    if event.get("run_id"):
        lines.append(f"run: {event['run_id']}")
    if event.get("attempt"):
        lines.append(f"attempt: {event['attempt']}")
    if event.get("recipe"):
        lines.append(f"recipe: {event['recipe']}")
    lines.append(f"state: {state}")
    if event.get("step") is not None:
        total = event.get("total_steps")
        lines.append(f"step: {event['step']}/{total if total is not None else '?'}")
    if event.get("reason"):
        lines.append(f"reason: {event['reason']}")
    if event.get("elapsed_s") is not None:
        lines.append(f"elapsed: {format_elapsed(event['elapsed_s'])}")
    if event.get("cost") is not None:
        lines.append(f"cost so far: {money(event['cost'], event.get('currency'))}")
    if event.get("wandb"):
        lines.append(f"W&B: {event['wandb']}")
    if event.get("look"):
        lines.append(f"look: {event['look']}")
    kind = {"finished": "success", "recovered": "success", "busy": "info"}.get(state, "failure")
    if state in ("test", "idle"):
        kind = "info" if state == "test" else "warning"
    return title, "\n".join(lines), kind
