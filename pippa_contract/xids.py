"""The one GPU-fault model: NVIDIA's Xid events, what each means, and how the kernel log names them.

The doctor (its ``xid`` checks), the host's alert watcher and the failure classifier all read Xids
through this module, so an Xid is hardware or the program's own fault, ``fail`` or ``warn``, in one place.

Each row comes from NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/) and its GPU debug
guidelines (which Xids mean the GPU needs a reset or the board needs replacing):
- ``hardware``: the GPU, its memory, its links or its firmware failed; a run that died with one is a
  ``gpu-fault`` (retried on the other GPUs, or another host), and the watcher alerts it as a GPU fault.
- ``program``: usually the program that ran (a bad kernel, an illegal address); the run's own
  traceback decides its class, and the watcher alerts it as what it is.
An Xid not in the catalog is ``warn`` to the doctor and not hardware to the classifier.

The kernel log: the driver prints ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.``;
``dmesg`` prefixes ``[ 1234.567890]`` (seconds since boot), which ``boot_time`` places in wall-clock time.

Standard library only, python3 >= 3.8 (shipped to hosts in the agent bundle).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

HARDWARE, PROGRAM = "hardware", "program"
FAIL, WARN = "fail", "warn"


@dataclass(frozen=True)
class XidInfo:
    kind: str  # HARDWARE or PROGRAM
    status: str  # the doctor's status while the event is in the kernel log since boot: FAIL or WARN
    meaning: str  # a few words, as NVIDIA's catalog names it
    todo: str  # what to do, one clause


CATALOG: dict[int, XidInfo] = {
    13: XidInfo(PROGRAM, WARN, "graphics engine exception", "usually a bug in the program that ran"),
    31: XidInfo(
        PROGRAM,
        WARN,
        "GPU memory page fault (MMU)",
        "usually a bug in the program that ran; if no program of yours faulted, ask the provider",
    ),
    43: XidInfo(PROGRAM, WARN, "a program stopped on a GPU fault", "usually a bug in the program that ran"),
    45: XidInfo(
        PROGRAM,
        WARN,
        "a program was stopped (preemptive cleanup)",
        "follows another fault or a killed program",
    ),
    48: XidInfo(
        HARDWARE, FAIL, "double-bit ECC error", "reboot; if it comes back, ask the provider for another box"
    ),
    61: XidInfo(
        HARDWARE, FAIL, "internal micro-controller breakpoint", "reboot; ask the provider if it recurs"
    ),
    62: XidInfo(HARDWARE, FAIL, "internal micro-controller halt", "reboot; ask the provider if it recurs"),
    63: XidInfo(
        HARDWARE,
        WARN,
        "ECC page retirement or row remap recorded",
        "reboot when idle so the remap takes effect",
    ),
    64: XidInfo(
        HARDWARE,
        FAIL,
        "ECC page retirement or row remap failed",
        "the memory cannot be repaired: ask for another box",
    ),
    74: XidInfo(
        HARDWARE, FAIL, "NVLink error", "NCCL may hang or crash: ask the provider to check the NVLinks"
    ),
    79: XidInfo(
        HARDWARE,
        FAIL,
        "fallen off the bus",
        "the GPU is gone until a reboot; ask the provider for another box",
    ),
    92: XidInfo(
        HARDWARE, WARN, "high single-bit ECC error rate", "watch it; ask the provider if it persists"
    ),
    94: XidInfo(
        HARDWARE,
        WARN,
        "contained ECC error (the application was stopped)",
        "reboot when idle; watch for more",
    ),
    95: XidInfo(
        HARDWARE, FAIL, "uncontained ECC error", "reset the GPU (reboot); ask for another box if it recurs"
    ),
    119: XidInfo(HARDWARE, FAIL, "GSP firmware timeout", "reboot; ask the provider if it recurs"),
    120: XidInfo(HARDWARE, FAIL, "GSP firmware error", "reboot; ask the provider if it recurs"),
    140: XidInfo(
        HARDWARE, FAIL, "unrecovered ECC error", "reset the GPU (reboot); ask for another box if it recurs"
    ),
}
UNKNOWN = XidInfo(PROGRAM, WARN, "an Xid event", "look it up in NVIDIA's Xid catalog")

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)$")
_DMESG_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


@dataclass(frozen=True)
class XidEvent:
    pci: str  # the PCI address as logged (``0000:18:00``)
    xid: int
    rest: str  # what the driver said after the number
    line: str  # the whole kernel log line, stripped

    @property
    def info(self) -> XidInfo:
        return info(self.xid)

    @property
    def hardware(self) -> bool:
        return self.info.kind == HARDWARE


def info(xid: int) -> XidInfo:
    """The catalog's row for ``xid``, or ``UNKNOWN``."""
    return CATALOG.get(xid, UNKNOWN)


def events(lines: Sequence[str]) -> list[XidEvent]:
    """Every Xid event in these kernel log lines, in order."""
    out = []
    for line in lines:
        m = _XID.search(line)
        if m:
            out.append(XidEvent(m.group(1), int(m.group(2)), m.group(3).strip(), line.strip()))
    return out


def pci_key(address: str) -> str:
    """A PCI address as the kernel logs it (``0000:18:00``, ``PCI:0000:18:00``) or nvidia-smi prints it
    (``00000000:18:00.0``), reduced to ``BUS:DEVICE`` in upper case, which all of them agree on."""
    parts = address.upper().replace("PCI:", "").split(".")[0].split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else address.upper()


def boot_time() -> float | None:
    """When this machine booted (unix s), from /proc/uptime; None where it cannot be read."""
    try:
        with open("/proc/uptime") as f:
            return time.time() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def logged_at(line: str, boot: float | None) -> float | None:
    """A dmesg line's wall-clock time (unix s) from its ``[seconds since boot]`` stamp; None without one."""
    m = _DMESG_STAMP.match(line)
    return boot + float(m.group(1)) if (m and boot is not None) else None
