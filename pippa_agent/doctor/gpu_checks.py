"""The passive GPU checks: pure functions from the parsed facts (``smi.gpu_facts``, the kernel log's Xids,
the NVLink states) to checks. Each failing line says what is wrong and what to do."""

from __future__ import annotations

from pippa_agent.doctor.smi import SLOWDOWNS
from pippa_contract.doctor import FAIL, OK, SKIPPED, WARN, check
from pippa_contract.xids import XidEvent, info, pci_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_agent.doctor.smi import Gpu
    from pippa_contract.messages import Check

ASK = "ask the provider for another box"


def count(gpus: list[Gpu], expected: int | None) -> list[Check]:
    n = len(gpus)
    if expected is None:
        return [
            check(
                "gpu_count",
                OK,
                f"{n} GPU(s): {gpus[0]['name'] if gpus else '-'} (no gpus = N in the "
                "host entry to compare with)",
            )
        ]
    if n < expected:
        return [
            check(
                "gpu_count",
                FAIL,
                f"{n} of the {expected} GPUs the host entry expects are visible: "
                f"a GPU fell off or is hidden; {ASK}",
            )
        ]
    return [
        check("gpu_count", OK, f"{n} GPU(s), as the host entry expects: {gpus[0]['name'] if gpus else '-'}")
    ]


def per_gpu(g: Gpu) -> list[Check]:
    """ECC, remapping, slowdown, temperature, PCIe link, persistence and MIG of one GPU."""
    i, out = g["index"], []
    unc = g["ecc_uncorrected_volatile"]
    if g["ecc_mode"] == "Disabled":
        out.append(
            check(
                "ecc",
                WARN,
                f"GPU {i}: ECC is off: memory errors go unnoticed; ask the provider "
                "to enable it (nvidia-smi -e 1, then reboot)",
                i,
            )
        )
    elif unc:
        out.append(check("ecc", FAIL, f"GPU {i}: {unc} uncorrectable ECC error(s) since boot: {ASK}", i))
    elif g["ecc_uncorrected_aggregate"]:
        out.append(
            check(
                "ecc",
                WARN,
                f"GPU {i}: {g['ecc_uncorrected_aggregate']} uncorrectable ECC error(s) "
                "in its lifetime (none since boot): watch it",
                i,
            )
        )
    if g["remap_failure"] == "Yes":
        out.append(
            check("remap", FAIL, f"GPU {i}: a row remapping failed: its memory cannot be repaired; {ASK}", i)
        )
    elif g["remap_pending"] == "Yes":
        out.append(
            check(
                "remap",
                WARN,
                f"GPU {i}: a row remap is pending: reset the GPU (reboot) before a "
                "long run, or the bad row stays in use",
                i,
            )
        )
    if g["retired_pending"] == "Yes":
        out.append(
            check("remap", WARN, f"GPU {i}: a page retirement is pending: reboot before a long run", i)
        )
    active = [why for key, why in SLOWDOWNS if g["reasons"].get(key) == "Active"]
    if active:
        status = WARN if active == [SLOWDOWNS[-1][1]] else FAIL  # a power cap alone is normal under load
        todo = "check cooling and power with the provider" if status == FAIL else "fine under load"
        out.append(check("throttle", status, f"GPU {i}: clocks held down: {', '.join(active)}: {todo}", i))
    hot = _above_slowdown(g)
    if hot:
        out.append(
            check(
                "temperature", FAIL, f"GPU {i}: {hot}: it will slow down; check cooling with the provider", i
            )
        )
    gen, gen_max, width, width_max = g["pcie_gen"], g["pcie_gen_max"], g["pcie_width"], g["pcie_width_max"]
    if g["pcie_gen_host_max"]:
        gen_max = min(gen_max, g["pcie_gen_host_max"]) if gen_max else g["pcie_gen_host_max"]
    # an idle GPU may train its link down to save power (P8): only a busy or P0 GPU's link counts
    idle = g["pstate"] not in (None, "P0")
    if width and width_max and width < width_max:
        out.append(
            check(
                "pcie",
                WARN if idle else FAIL,
                f"GPU {i}: PCIe link x{width:.0f} of x{width_max:.0f}: "
                f"host transfers at {width / width_max:.0%} speed; ask the provider to reseat it",
                i,
            )
        )
    if gen and gen_max and gen < gen_max and not idle:
        out.append(
            check(
                "pcie",
                WARN,
                f"GPU {i}: PCIe Gen{gen:.0f} of Gen{gen_max:.0f}: slower host transfers; "
                "ask the provider (BIOS or riser)",
                i,
            )
        )
    if g["mig"] == "Enabled":
        out.append(
            check(
                "mig",
                FAIL,
                f"GPU {i}: MIG is on: training sees slices, not the GPU; turn it off "
                "(sudo nvidia-smi -i {0} -mig 0) or ask the provider".format(i),
                i,
            )
        )
    if g["persistence"] == "Disabled":
        out.append(
            check(
                "persistence",
                WARN,
                f"GPU {i}: persistence mode is off: each start re-initialises "
                f"the GPU (slow start); sudo nvidia-smi -i {i} -pm 1",
                i,
            )
        )
    return out


def _above_slowdown(g: Gpu) -> str:
    temp, slow = g["temp"], g["temp_slow"]
    if temp is not None and slow is not None and temp >= slow:
        return f"{temp:.0f} C, at or above its slowdown temperature {slow:.0f} C"
    tl, tl_slow = g["tlimit"], g["tlimit_slow"]  # newer drivers: degrees of margin below T.Limit
    if tl is not None and tl_slow is not None and tl <= tl_slow:
        return f"{tl:.0f} C from T.Limit, at or past its slowdown point ({tl_slow:.0f} C)"
    return ""


def nvlink(gpus: list[Gpu], links: dict[int, list[tuple[int, bool]]]) -> list[Check]:
    out = []
    for g in gpus:
        down = [n for n, up in links.get(g["index"], []) if not up]
        if down:
            i = g["index"]
            out.append(
                check(
                    "nvlink",
                    FAIL,
                    f"GPU {i}: NVLink {', '.join(map(str, down))} down of "
                    f"{len(links[i])}: all-reduce falls back to slower paths or hangs; {ASK}",
                    i,
                )
            )
    return out


def xid_checks(gpus: list[Gpu], events: list[XidEvent]) -> list[Check]:
    """One check per (GPU, Xid), the worst first; counts repeated events."""
    by_bus = {pci_key(g["bus_id"]): g["index"] for g in gpus if g["bus_id"]}
    seen: dict[tuple[int | None, int], int] = {}
    for e in events:
        key = (by_bus.get(pci_key(e.pci)), e.xid)
        seen[key] = seen.get(key, 0) + 1
    out = []
    for (gpu, xid), n in seen.items():
        row = info(xid)
        status, meaning, todo = row.status, row.meaning, row.todo
        who = f"GPU {gpu}" if gpu is not None else "a GPU not listed by nvidia-smi"
        times = f" ({n} times)" if n > 1 else ""
        out.append(check("xid", status, f"{who}: Xid {xid} ({meaning}) since boot{times}: {todo}", gpu))
    return sorted(out, key=lambda c: c["status"] != FAIL)


def kernel_skipped(why: str) -> Check:
    return check(
        "xid",
        SKIPPED,
        f"kernel log unreadable ({why}): run `sudo dmesg | grep Xid` yourself, or "
        "add the user to the adm group",
    )


# the per-GPU check kinds (per_gpu, nvlink): each gets one row when no GPU raised it (passing)
PER_GPU = ("ecc", "remap", "throttle", "temperature", "pcie", "nvlink", "mig", "persistence")


def _on(n: int) -> str:
    return f"on {n} GPU{'s' if n != 1 else ''}"


def _margin(g: Gpu) -> float | None:
    """Degrees C below the slowdown temperature (either way the driver reports it), None if unknown."""
    if g["temp"] is not None and g["temp_slow"] is not None:
        return float(g["temp_slow"] - g["temp"])
    if g["tlimit"] is not None and g["tlimit_slow"] is not None:
        return float(g["tlimit"] - g["tlimit_slow"])
    return None


def passing(gpus: list[Gpu], rows: list[Check], links: dict[int, list[tuple[int, bool]]]) -> list[Check]:
    """One row (``gpu`` None) per per-GPU check kind that raised nothing on any GPU, so the table shows
    every check and not only the faults: ``ok`` where nvidia-smi gave the facts to judge, ``skipped``
    with the reason where it did not (never a silent pass)."""
    if not gpus:
        return []
    raised = {c["check"] for c in rows}
    n, out = len(gpus), []

    def add(kind: str, judged: bool, ok: str, why_not: str) -> None:
        if kind not in raised:
            out.append(check(kind, OK, ok) if judged else check(kind, SKIPPED, why_not))

    add(
        "ecc",
        all(g["ecc_mode"] is not None for g in gpus),
        f"ECC on, no uncorrectable error since boot {_on(n)}",
        "nvidia-smi reports no ECC mode for some GPUs",
    )
    add(
        "remap",
        any(g["remap_pending"] is not None or g["retired_pending"] is not None for g in gpus),
        f"no pending or failed row remap or page retirement {_on(n)}",
        "nvidia-smi reports neither row remapping nor page retirement for these GPUs",
    )
    add(
        "throttle",
        all(any(v is not None for v in g["reasons"].values()) for g in gpus),
        f"no HW, thermal or power-brake slowdown {_on(n)}",
        "nvidia-smi reports no clock event reasons for some GPUs",
    )
    margins = [m for m in map(_margin, gpus) if m is not None]
    add(
        "temperature",
        len(margins) == n,
        f"below the slowdown temperature {_on(n)} (the hottest is {min(margins or [0]):.0f} C below it)",
        "nvidia-smi reports no slowdown temperature for some GPUs",
    )
    widths = sorted(
        {f"Gen{g['pcie_gen']:.0f} x{g['pcie_width']:.0f}" for g in gpus if g["pcie_gen"] and g["pcie_width"]}
    )
    idle_down = any(g["pcie_gen"] and g["pcie_gen_max"] and g["pcie_gen"] < g["pcie_gen_max"] for g in gpus)
    speed = "full width (idle GPUs train their link down)" if idle_down else "full width and speed"
    add(
        "pcie",
        all(g["pcie_gen"] and g["pcie_width"] for g in gpus),
        f"PCIe links at {speed} {_on(n)}: {', '.join(widths)}",
        "nvidia-smi reports no PCIe link for some GPUs",
    )
    with_links = [links[g["index"]] for g in gpus if links.get(g["index"])]
    add(
        "nvlink",
        bool(with_links),
        f"all {sum(map(len, with_links))} NVLinks up {_on(len(with_links))}",
        "no NVLink reported by nvidia-smi nvlink -s (PCIe-only GPUs have none)",
    )
    add("mig", True, f"MIG off {_on(n)}" if any(g["mig"] for g in gpus) else f"no MIG {_on(n)}", "")
    add(
        "persistence",
        all(g["persistence"] for g in gpus),
        f"persistence mode enabled {_on(n)}",
        "nvidia-smi reports no persistence mode",
    )
    return out
