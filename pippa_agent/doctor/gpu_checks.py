"""The passive GPU checks: pure functions from the parsed facts (``smi.gpu_facts``, the kernel log's Xids,
the NVLink states) to checks. Each failing line says what is wrong and what to do."""

from __future__ import annotations

from pippa_agent.doctor.kernel import XIDS, pci_key
from pippa_agent.doctor.smi import SLOWDOWNS
from pippa_contract.doctor import FAIL, OK, SKIPPED, WARN, check

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_agent.doctor.kernel import Xid
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


def xid_checks(gpus: list[Gpu], events: list[Xid]) -> list[Check]:
    """One check per (GPU, Xid), the worst first; counts repeated events."""
    by_bus = {pci_key(g["bus_id"]): g["index"] for g in gpus if g["bus_id"]}
    seen: dict[tuple[int | None, int], int] = {}
    for address, xid, _ in events:
        key = (by_bus.get(pci_key(address)), xid)
        seen[key] = seen.get(key, 0) + 1
    out = []
    for (gpu, xid), n in seen.items():
        status, meaning, todo = XIDS.get(xid, (WARN, "an Xid event", "look it up in NVIDIA's Xid catalog"))
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
