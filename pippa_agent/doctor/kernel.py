"""Xid events in the kernel log since boot: the NVIDIA driver's own report of a GPU fault.

The driver logs ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.``; the PCI
address maps the event to a GPU. Read from ``dmesg``, else ``journalctl -k -b`` (a host with
kernel.dmesg_restrict=1 lets only root or the adm group read either): where neither answers, the
check is ``skipped`` with that reason, never a silent pass. What each Xid means: ``pippa_contract.xids``.
"""

from __future__ import annotations

from pippa_agent.doctor.proc import bounded as run
from pippa_contract.xids import XidEvent, events

KERNEL_LOG_TIMEOUT_S = 10.0


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


def xids(lines: list[str]) -> list[XidEvent]:
    """The Xid events of these lines (the contract's one reader, ``pippa_contract.xids``)."""
    return events(lines)
