"""Xid events in the kernel log since boot: the NVIDIA driver's own report of a GPU fault.

The driver logs ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.``; the PCI
address maps the event to a GPU. Read from ``dmesg``, else ``journalctl -k -b`` (a host with
kernel.dmesg_restrict=1 lets only root or the adm group read either): where neither answers, the
check is ``skipped`` with that reason, never a silent pass.
"""

from __future__ import annotations

import re

from pippa_agent.doctor.proc import bounded as run

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Tuple

    Xid = Tuple[str, int, str]  # (PCI address as logged, xid, the rest of the line)

KERNEL_LOG_TIMEOUT_S = 10.0
# Xid -> (status, meaning, what to do). From NVIDIA's "XID Errors" catalog
# (https://docs.nvidia.com/deploy/xid-errors/) and its "GPU Debug Guidelines" (which Xids mean the GPU
# needs a reset or the board needs replacing); an Xid not listed here is a warn.
FAIL, WARN = "fail", "warn"
XIDS: dict[int, tuple[str, str, str]] = {
    79: (FAIL, "fallen off the bus", "the GPU is gone until a reboot; ask the provider for another box"),
    48: (FAIL, "double-bit ECC error", "reboot; if it comes back, ask the provider for another box"),
    63: (WARN, "ECC page retirement or row remap recorded", "reboot when idle so the remap takes effect"),
    64: (
        FAIL,
        "ECC page retirement or row remap failed",
        "the memory cannot be repaired: ask for another box",
    ),
    74: (FAIL, "NVLink error", "NCCL may hang or crash: ask the provider to check the NVLinks"),
    92: (WARN, "high single-bit ECC error rate", "watch it; ask the provider if it persists"),
    94: (WARN, "contained ECC error (the application was stopped)", "reboot when idle; watch for more"),
    95: (FAIL, "uncontained ECC error", "reset the GPU (reboot); ask for another box if it recurs"),
    119: (FAIL, "GSP firmware timeout", "reboot; ask the provider if it recurs"),
    120: (FAIL, "GSP firmware error", "reboot; ask the provider if it recurs"),
    31: (
        WARN,
        "GPU memory page fault (MMU)",
        "usually a bug in the program that ran; if no program of yours faulted, ask the provider",
    ),
    13: (WARN, "graphics engine exception", "usually a bug in the program that ran"),
    43: (WARN, "a program stopped on a GPU fault", "usually a bug in the program that ran"),
    45: (WARN, "a program was stopped (preemptive cleanup)", "follows another fault or a killed program"),
    61: (FAIL, "internal micro-controller breakpoint", "reboot; ask the provider if it recurs"),
    62: (FAIL, "internal micro-controller halt", "reboot; ask the provider if it recurs"),
}
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)$")


def read_log(timeout: float = KERNEL_LOG_TIMEOUT_S) -> tuple[list[str] | None, str]:
    """``(lines, source)``; ``(None, why)`` where the kernel log cannot be read by this user."""
    whys = []
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        p = run(argv, timeout=timeout)
        out = p.stdout.decode(errors="replace")
        lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("-- ")]
        if p.returncode == 0 and lines:
            return lines, argv[0]
        err = (p.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        whys.append(f"{argv[0]}: {err if p.returncode else 'no lines'}"[:140])
    return None, "; ".join(whys)


def xids(lines: list[str]) -> list[Xid]:
    out = []
    for line in lines:
        m = _XID.search(line)
        if m:
            out.append((m.group(1), int(m.group(2)), m.group(3).strip()))
    return out


def pci_key(address: str) -> str:
    """A PCI address as the kernel logs it (``0000:18:00``) or nvidia-smi prints it
    (``00000000:18:00.0``), reduced to ``BUS:DEVICE`` in upper case, which both agree on."""
    parts = address.upper().split(".")[0].split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else address.upper()
