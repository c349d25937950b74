"""GPU faults while a run is active, for the host's alert watcher: a new Xid line in the kernel log, new
uncorrectable ECC errors, a row remapping that failed. Each is one alert; what was there when watching
began (or before the run) is the baseline, never an alert."""

from __future__ import annotations

import time

from pippa_agent.doctor import kernel, smi
from pippa_contract.xids import XidEvent, logged_at, pci_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_agent.doctor.smi import Gpu

POLL_S = 30.0  # the kernel log and nvidia-smi -q -x every 30 s while a run is active


def _clock(line: str, boot: float | None) -> str:
    """The event's wall-clock time (HH:MM) from dmesg's seconds since boot, else now."""
    when = logged_at(line, boot)
    return time.strftime("%H:%M", time.localtime(time.time() if when is None else when))


class GpuHealthWatch:
    """Fed one observation per poll; returns the alerts due: ``[(subject, why)]``."""

    def __init__(self) -> None:
        self.xid_lines: set[str] | None = None  # None: no baseline yet
        self.ecc: dict[str, int] = {}  # GPU uuid (else bus id) -> uncorrectable errors since boot
        self.remap_failed: set[str] = set()
        self.found: list[XidEvent] = []  # Xid events alerted and not yet recorded in the doctor's history

    def sample(
        self, lines: list[str] | None, gpus: list[Gpu] | None, run: str | None, boot: float | None = None
    ) -> list[tuple[str, str]]:
        alerts: list[tuple[str, str]] = []
        by_bus = {pci_key(g["bus_id"]): g["index"] for g in gpus or [] if g.get("bus_id")}
        during = f" during run {run}" if run else ""
        if lines is not None:
            xid_lines = {e.line for e in kernel.xids(lines)}
            if self.xid_lines is not None and run is not None:
                for line in sorted(xid_lines - self.xid_lines):
                    for e in kernel.xids([line]):  # one event: the line, whole
                        idx = by_bus.get(pci_key(e.pci))
                        who = f"GPU {idx}" if idx is not None else f"GPU at PCI {e.pci}"
                        what = "GPU fault" if e.hardware else "program fault on the GPU"
                        at = _clock(line, boot)
                        alerts.append((who, f"{who}: {what}: Xid {e.xid} ({e.info.meaning}) at {at}{during}"))
                        self.found.append(e)
            self.xid_lines = xid_lines if self.xid_lines is None else self.xid_lines | xid_lines
        for g in gpus or []:
            key = str(g.get("uuid") or g.get("bus_id"))
            unc = g.get("ecc_uncorrected_volatile") or 0
            before = self.ecc.get(key)
            if before is not None and unc > before and run is not None:
                alerts.append(
                    (
                        f"GPU {g['index']}",
                        f"GPU {g['index']}: {unc - before} new uncorrectable ECC "
                        f"error(s) at {time.strftime('%H:%M')}{during}",
                    )
                )
            self.ecc[key] = unc
            if g.get("remap_failure") == "Yes" and key not in self.remap_failed:
                at = time.strftime("%H:%M")
                why = f"a row remapping failed at {at}{during}: its memory cannot be repaired"
                if run is not None:
                    alerts.append((f"GPU {g['index']}", f"GPU {g['index']}: {why}"))
                self.remap_failed.add(key)
        return alerts


def observe() -> tuple[list[str] | None, list[Any] | None]:
    """One poll's facts: the kernel log's lines and the GPUs (None for what could not be read)."""
    lines, _ = kernel.read_log()
    try:
        _, root = smi.read_xml()
    except smi.SmiError:
        root = None
    return lines, (smi.gpu_facts(root) if root is not None else None)
