"""`pippa doctor`'s result: one definition the host agent writes, the laptop reads, and scripts gate on.

A result is ``{"host", "verdict", "checks": [{"check", "status", "gpu", "detail"}], "measured", "time"}``:
``status`` is one of STATUSES, ``gpu`` a GPU index or None (the host as a whole), ``detail`` one line
that says what is wrong and what to do. ``verdict`` is the worst status (``skipped`` counts as ``ok``).
``measured`` holds the active checks' figures (``{"gpus": {"<index>": {"uuid", "gemm_tflops",
"copy_tbs"}}, "allreduce_gbs": float}``), the history's regression check compares them per GPU.
Every result is also written on the host, one JSON file per run, under ``<remote_dir>/doctor/``.
Standard library only (the agent runs it on python >= 3.8).
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the types (Check, DoctorResult) live with the other messages, for annotations only
    from typing import Any

    from pippa_contract.messages import Check, DoctorResult


OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)
_RANK = {OK: 0, SKIPPED: 0, WARN: 1, FAIL: 2}
DOCTOR_DIR = "doctor"  # under remote_dir: one <stamp>.json per doctor run
FAIL_MAX_AGE_S = 86400.0  # `pippa run` refuses a host whose verdict is fail and younger than this
REGRESSION = 0.9  # a figure below 0.9 x the same GPU's previous best is a warn


def check(name: str, status: str, detail: str, gpu: int | None = None) -> Check:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return {"check": name, "status": status, "gpu": gpu, "detail": detail}


def verdict(checks: list[Check]) -> str:
    """The worst status of the checks: fail > warn > ok (skipped counts as ok)."""
    worst = max((_RANK.get(c["status"], 0) for c in checks), default=0)
    return (OK, WARN, FAIL)[worst]


def result(host: str, checks: list[Check], measured: dict[str, Any], quick: bool) -> DoctorResult:
    return {
        "host": host,
        "verdict": verdict(checks),
        "checks": list(checks),
        "measured": measured,
        "time": time.time(),
        "quick": quick,
    }


def failed(res: DoctorResult) -> list[Check]:
    return [c for c in res.get("checks", []) if c.get("status") == FAIL]


def history_name(stamp: float, pid: int) -> str:
    """The file of one doctor run: sorts by time (zero-padded milliseconds)."""
    return f"{int(stamp * 1000):015d}-{pid}.json"


def is_history_name(name: str) -> bool:
    stem, _, ext = name.partition(".")
    head, _, pid = stem.partition("-")
    return ext == "json" and head.isdigit() and pid.isdigit()
