"""The doctor's results kept on the host: ``<remote_dir>/doctor/<stamp>-<pid>.json``, one per run,
written atomically; a figure more than 10% below the same GPU's previous best is a warn."""

from __future__ import annotations

import contextlib
import json
import os

from pippa_agent.host import host_path, write_atomic
from pippa_contract.doctor import DOCTOR_DIR, REGRESSION, WARN, check, history_name, is_history_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_contract.messages import Check, DoctorResult

FIGURES = (("gemm_tflops", "bf16 GEMM", "TFLOPS"), ("copy_tbs", "device copy", "TB/s"))
KEEP = 200  # results kept per host; older ones are removed when a new one is stored


def directory(remote_dir: str) -> str:
    return os.path.join(host_path(remote_dir), DOCTOR_DIR)


def load(remote_dir: str, limit: int) -> list[DoctorResult]:
    """The newest ``limit`` results, newest first (an unreadable file is passed over)."""
    d = directory(remote_dir)
    try:
        names = sorted((n for n in os.listdir(d) if is_history_name(n)), reverse=True)
    except OSError:
        return []
    out: list[DoctorResult] = []
    for name in names:
        if len(out) >= limit:
            break
        try:
            with open(os.path.join(d, name), "rb") as f:
                out.append(json.loads(f.read()))
        except (OSError, ValueError):
            continue
    return out


def store(remote_dir: str, res: DoctorResult) -> str:
    d = directory(remote_dir)
    os.makedirs(d, exist_ok=True)
    stamp = res.get("time", 0.0)
    path = os.path.join(d, history_name(stamp, os.getpid()))
    while os.path.exists(path):  # two results of one process in one millisecond (the watcher's, a doctor's)
        stamp += 0.001
        path = os.path.join(d, history_name(stamp, os.getpid()))
    write_atomic(path, (json.dumps(res) + "\n").encode())
    old = sorted((n for n in os.listdir(d) if is_history_name(n)), reverse=True)[KEEP:]
    for name in old:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(d, name))
    return path


def _gpu_key(i: str, g: dict[str, Any]) -> str:
    return str(g.get("uuid") or f"index {i}")


def best(previous: list[DoctorResult]) -> dict[str, dict[str, float]]:
    """``{GPU (its uuid, else its index): {figure: best value}}`` over earlier results."""
    out: dict[str, dict[str, float]] = {}
    for res in previous:
        for i, g in ((res.get("measured") or {}).get("gpus") or {}).items():
            mine = out.setdefault(_gpu_key(i, g), {})
            for key, _, _ in FIGURES:
                v = g.get(key)
                if isinstance(v, (int, float)) and v > mine.get(key, 0.0):
                    mine[key] = float(v)
    return out


def regressions(measured: dict[str, Any], previous: list[DoctorResult]) -> list[Check]:
    before = best(previous)
    out = []
    for i, g in sorted((measured.get("gpus") or {}).items()):
        was = before.get(_gpu_key(i, g), {})
        for key, what, unit in FIGURES:
            v, top = g.get(key), was.get(key)
            if isinstance(v, (int, float)) and top and v < REGRESSION * top:
                drop = 1 - v / top
                out.append(
                    check(
                        "history",
                        WARN,
                        f"GPU {i}: {what} {v:.1f} {unit}, {drop:.0%} below its "
                        f"previous best {top:.1f}: the box got slower; rerun, then ask the provider",
                        int(i),
                    )
                )
    return out
