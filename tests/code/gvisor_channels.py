"""The machine-state channels (``hostile_machine_state``) against the gVisor level.

Inside gVisor a program reads the sentry's ``/proc``, not the host's: ``meminfo`` opens, but its
figures are the sandbox's own. So a gauge is contained when the value held by a concurrent sandbox
does not arrive (the strict level's survey calls any open of ``meminfo`` an escape, which here it is
not). Run as a script (``python gvisor_channels.py``, as an ordinary user too) it prints one JSON line:
the launcher's mode and each channel's outcome.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostile_machine_state as hms

from training_core.sandbox import isolation, run_python
from training_core.sandbox.launcher import Launcher

Run = hms.Run


def gauge_moves(name: str, hold: str, kib: int) -> Callable[[Run], tuple[bool, str]]:
    """A reader reads a /proc/meminfo gauge before and while a concurrent sandbox holds ``kib`` KiB:
    escaped when the gauge moved by most of that (others move the host's gauge too)."""
    read = hms.READ.replace("@FILE@", "/proc/meminfo").replace("@NAME@", name)

    def channel(run: Run) -> tuple[bool, str]:
        with ThreadPoolExecutor(2) as ex:
            fr = ex.submit(run, read + "import time\ntime.sleep(1.5)\n" + read)
            time.sleep(0.5)
            fw = ex.submit(run, hold.replace("@VALUE@", str(kib)))
            r, w = fr.result(), fw.result()
        got = [int(x) for x in r.stdout.split()[1::2] if x.isdigit()]
        escaped = len(got) == 2 and got[1] - got[0] >= kib * 3 // 4  # the host's gauge moves by more
        return not escaped, f"held {kib} KiB ({w.stdout.strip()[:40]!r}); read {r.stdout.strip()[:80]!r}"

    return channel


VMSTAT = "import os\nprint('ESCAPED' if os.path.exists('/proc/vmstat') else 'absent')\n"

CHANNELS: dict[str, Callable[[Run], tuple[bool, str]]] = {
    "no_vmstat": lambda run: ((o := run(VMSTAT).stdout.strip()) == "absent", o),
    "proc_keys": lambda run: ("ESCAPED" not in (o := run(hms.SINGLE["proc_keys"]).stdout), o.strip()),
    "mlock_counter_between_runs": hms.mlock_counter_between_runs,
    "mlocked_gauge_concurrent": gauge_moves("Mlocked", hms.HOLD_MLOCKED, 4096),
    "shmem_gauge_concurrent": gauge_moves("Shmem", hms.HOLD_SHMEM, 8192),
    "sigpending_accounting": hms.accounting_concurrent(hms.SIGPENDING, 777),
    "msgqueue_accounting": hms.accounting_concurrent(hms.MQUEUE, 3),
}


def check(launcher: Launcher) -> dict[str, tuple[bool, str]]:
    """Each channel's (contained, evidence) at ``launcher``."""

    def run(code: str) -> object:
        return run_python(code, launcher=launcher)

    with ThreadPoolExecutor(3) as ex:
        futures = {name: ex.submit(ch, run) for name, ch in CHANNELS.items()}
        return {name: f.result() for name, f in futures.items()}


def main() -> int:
    launcher = isolation.detect(level="gvisor")
    out = check(launcher)
    print(
        json.dumps(
            {
                "mode": launcher.isolation.mode,
                "memory_cap": launcher.isolation.memory_cap,
                "outcomes": {k: list(v) for k, v in out.items()},
            }
        )
    )
    return 0 if all(ok for ok, _ in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
