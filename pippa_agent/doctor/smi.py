"""The GPUs' facts from NVIDIA's structured output: ``nvidia-smi -q -x`` parsed once into one dict per
GPU, plus ``nvidia-smi nvlink -s`` for the links (the XML has no NVLink state).

Tag names follow NVIDIA's DTDs v12 and v13 (``nvsmi_device_v12.dtd``, drivers 5xx): older drivers say
``clocks_throttle_reasons`` where newer ones say ``clocks_event_reasons``, newer ones give temperatures
relative to T.Limit; both are read. A value the driver cannot give (``N/A``) is None, never 0.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pippa_agent.doctor.proc import bounded as run
from pippa_agent.host import which

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict

    Gpu = Dict[str, Any]

NVIDIA_SMI = "nvidia-smi"
SMI_TIMEOUT_S = 20.0
# clock event (throttle) reasons that slow a run, and what each means (NVML's nvmlClocksEventReasons)
SLOWDOWNS = (
    ("hw_slowdown", "HW slowdown (the board cut clocks: power or thermal fault)"),
    ("hw_thermal_slowdown", "HW thermal slowdown (too hot)"),
    ("hw_power_brake_slowdown", "HW power brake (the power supply asked to slow down)"),
    ("sw_thermal_slowdown", "SW thermal slowdown (the driver cut clocks: too hot)"),
    ("sw_power_cap", "SW power cap (drawing its power limit)"),
)


class SmiError(Exception):
    """nvidia-smi is there but gave no usable answer (a hung or broken driver): the reason, one line."""


def text(el: ET.Element | None, path: str) -> str | None:
    """The element's text at ``path``; None for absent, empty or ``N/A``-like values."""
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    v = found.text.strip()
    if not v or v.upper() in ("N/A", "[N/A]") or v.startswith(("Requested functionality", "[")):
        return None
    return v


def number(el: ET.Element | None, path: str) -> float | None:
    """``"81 C"``, ``"16x"``, ``"700.00 W"``, ``"3"`` -> float; None when absent or not a number."""
    m = re.match(r"-?[0-9.]+", text(el, path) or "")
    try:
        return float(m.group(0)) if m else None
    except ValueError:
        return None


def read_xml(timeout: float = SMI_TIMEOUT_S) -> tuple[str | None, ET.Element | None]:
    """``(None, root)``; ``("no NVIDIA driver", None)`` without nvidia-smi; raises SmiError."""
    if which(NVIDIA_SMI) is None:
        return "no NVIDIA driver", None
    p = run([NVIDIA_SMI, "-q", "-x"], timeout=timeout)
    if p.returncode == 124:
        raise SmiError(
            f"nvidia-smi -q -x did not answer in {timeout:.0f}s (a hung driver): reboot the box "
            "or ask the provider for another"
        )
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0 or "<nvidia_smi_log" not in out:
        said = (out + p.stderr.decode(errors="replace")).splitlines()
        first = next((ln.strip() for ln in said if ln.strip()), f"exit status {p.returncode}")
        if "couldn't communicate with the nvidia driver" in first.lower():
            return "no NVIDIA driver loaded (" + first[:120] + ")", None
        raise SmiError(
            f"nvidia-smi -q -x gave no XML ({first[:120]}): the driver is broken; reboot or reinstall it"
        )
    try:
        # the DOCTYPE names a DTD that is not fetched: ElementTree resolves no external entity
        return None, ET.fromstring(out[out.index("<nvidia_smi_log") :])
    except ET.ParseError as e:
        raise SmiError(
            f"nvidia-smi -q -x printed broken XML ({e}): the driver is broken; reboot or reinstall it"
        ) from None


def _reasons(g: ET.Element) -> dict[str, str | None]:
    block = g.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block, prefix = g.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    return {key: text(block, prefix + key) for key, _ in SLOWDOWNS}


def _ecc(g: ET.Element, scope: str, kind: str) -> int | None:
    """Sum of ``kind`` (``correctable``/``uncorrectable``) ECC counters over ``scope``
    (``volatile``: since boot; ``aggregate``: lifetime). v12/v13 name them ``dram_uncorrectable``,
    ``sram_uncorrectable_parity``...; older drivers ``single_bit``/``double_bit`` with a ``total``."""
    block = g.find(f"ecc_errors/{scope}")
    if block is None:
        return None
    old = block.find("double_bit" if kind == "uncorrectable" else "single_bit")
    if old is not None:
        v = number(old, "total")
        return None if v is None else int(v)
    total, seen = 0, False
    for el in block:
        name = el.tag
        wanted = ("uncorrectable" in name) if kind == "uncorrectable" else name.endswith("_correctable")
        if wanted and el.text and re.match(r"^\s*[0-9]+\s*$", el.text):
            total += int(el.text)
            seen = True
    return total if seen else None


def gpu_facts(root: ET.Element) -> list[Gpu]:
    """One dict per GPU, in nvidia-smi's order (its minor number is the index CUDA and torch use when
    CUDA_DEVICE_ORDER=PCI_BUS_ID; nvidia-smi's own order is PCI order too)."""
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        pci = g.find("pci")
        link = pci.find("pci_gpu_link_info") if pci is not None else None
        remap = g.find("remapped_rows")
        temp = g.find("temperature")
        gpus.append(
            {
                "index": i,
                "name": text(g, "product_name") or "?",
                "uuid": text(g, "uuid"),
                "bus_id": (text(pci, "pci_bus_id") or g.get("id") or "").upper(),
                "persistence": text(g, "persistence_mode"),
                "mig": text(g, "mig_mode/current_mig"),
                "ecc_mode": text(g, "ecc_mode/current_ecc"),
                "ecc_corrected_volatile": _ecc(g, "volatile", "correctable"),
                "ecc_uncorrected_volatile": _ecc(g, "volatile", "uncorrectable"),
                "ecc_uncorrected_aggregate": _ecc(g, "aggregate", "uncorrectable"),
                "retired_pending": text(g, "retired_pages/pending_retirement"),
                "retired_dbe": number(g, "retired_pages/double_bit_retirement/retired_count"),
                "remap_pending": text(remap, "remapped_row_pending"),
                "remap_failure": text(remap, "remapped_row_failure"),
                "remap_uncorrectable": number(remap, "remapped_row_unc"),
                "reasons": _reasons(g),
                "temp": number(temp, "gpu_temp"),
                "temp_slow": number(temp, "gpu_temp_slow_threshold"),
                "tlimit": number(temp, "gpu_temp_tlimit"),
                "tlimit_slow": number(temp, "gpu_temp_slow_tlimit_threshold"),
                "pcie_gen": number(link, "pcie_gen/current_link_gen"),
                "pcie_gen_max": number(link, "pcie_gen/max_device_link_gen")
                or number(link, "pcie_gen/max_link_gen"),
                "pcie_gen_host_max": number(link, "pcie_gen/max_host_link_gen"),
                "pcie_width": number(link, "link_widths/current_link_width"),
                "pcie_width_max": number(link, "link_widths/max_link_width"),
                "pstate": text(g, "performance_state"),
                "mem_total_mib": number(g, "fb_memory_usage/total"),
            }
        )
    return gpus


def driver(root: ET.Element) -> tuple[str | None, str | None]:
    """``(driver version, the newest CUDA it supports)``."""
    return text(root, "driver_version"), text(root, "cuda_version")


_LINK = re.compile(r"^\s*Link\s+(\d+):\s*(.*)$")
_GPU_HEAD = re.compile(r"^GPU\s+(\d+):")


def nvlinks(timeout: float = SMI_TIMEOUT_S) -> dict[int, list[tuple[int, bool]]]:
    """``{gpu index: [(link, up), ...]}`` from ``nvidia-smi nvlink -s``; a GPU without links is absent.
    A link is down when the tool says ``<inactive>`` (its words since driver 4xx)."""
    out: dict[int, list[tuple[int, bool]]] = {}
    if which(NVIDIA_SMI) is None:
        return out
    p = run([NVIDIA_SMI, "nvlink", "-s"], timeout=timeout)
    if p.returncode != 0:
        return out
    gpu = None
    for line in p.stdout.decode(errors="replace").splitlines():
        head = _GPU_HEAD.match(line)
        if head:
            gpu = int(head.group(1))
            continue
        m = _LINK.match(line)
        if m and gpu is not None:
            out.setdefault(gpu, []).append((int(m.group(1)), "inactive" not in m.group(2).lower()))
    return out
