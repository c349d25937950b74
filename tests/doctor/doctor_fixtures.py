"""A GPU box on a loopback test host, built from real captures, and the faults rented boxes show.

The 8 x H100 box's ``nvidia-smi -q -x`` is made from REAL captures (tests/fixtures/nvidia-smi/SOURCES.md):
the XML structure and every value not listed below is the A100-SXM4 capture
``a100_sxm4_q_x_v12.xml`` (telegraf's testdata, driver 535.54.03, DTD v12); the values that make it an
H100 SXM box come from the H100 80GB HBM3 capture of nvidia_gpu_exporter (driver 590.48.01: product
name, driver and CUDA version, PCIe Gen5, 81559 MiB, 700 W, remapped-rows block, P0, MIG off,
persistence on); the GPU is repeated at 8 DGX-style bus ids. ``nvidia-smi nvlink -s`` is the H100
capture's own output, repeated per GPU. Each fault then edits one field, as the driver reports it.

``install_fakes`` puts the fake nvidia-smi (tests/dash/fake_smi.py, which answers ``-q -x`` and
``nvlink -s`` from files), dmesg, journalctl, dcgmi and a fake ``torch`` package (version facts only)
on the host; ``Case`` files are re-read on every call, so one host replays many cases.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
CAPTURES = TESTS / "fixtures" / "nvidia-smi"
sys.path.insert(0, str(TESTS / "dash"))
import fake_smi  # noqa: E402

BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # a DGX H100's GPU buses
CLEAN_GEMM = (781.0, 779.5, 783.2, 780.1, 782.4, 778.9, 780.8, 781.6)  # TFLOPS, within 1% of each other


def _set(el: ET.Element, path: str, value: str) -> None:
    found = el.find(path)
    if found is None:
        raise KeyError(path)
    found.text = value


def h100_box(n: int = 8) -> ET.Element:
    """The clean box: ``n`` healthy H100 SXM GPUs (see the module docstring for what comes from where)."""
    root = ET.parse(CAPTURES / "a100_sxm4_q_x_v12.xml").getroot()
    _set(root, "driver_version", "590.48.01")
    _set(root, "cuda_version", "13.1")
    _set(root, "attached_gpus", str(n))
    template = root.find("gpu")
    assert template is not None
    root.remove(template)
    g = copy.deepcopy(template)
    _set(g, "product_name", "NVIDIA H100 80GB HBM3")
    _set(g, "product_architecture", "Hopper")
    _set(g, "persistence_mode", "Enabled")
    _set(g, "mig_mode/current_mig", "Disabled")
    _set(g, "mig_mode/pending_mig", "Disabled")
    g.remove(g.find("mig_devices"))  # type: ignore[arg-type]
    link = "pci/pci_gpu_link_info/pcie_gen/"
    for tag in ("max_link_gen", "current_link_gen", "device_current_link_gen", "max_device_link_gen"):
        _set(g, link + tag, "5")
    _set(g, link + "max_host_link_gen", "5")
    _set(g, "fb_memory_usage/total", "81559 MiB")
    _set(g, "gpu_power_readings/current_power_limit", "700.00 W")
    remap = g.find("remapped_rows")
    assert remap is not None
    remap.text = None
    for tag, value in (
        ("remapped_row_corr", "0"),
        ("remapped_row_unc", "0"),
        ("remapped_row_pending", "No"),
        ("remapped_row_failure", "No"),
    ):
        ET.SubElement(remap, tag).text = value
    for i, bus in enumerate(BUS_IDS[:n]):
        gi = copy.deepcopy(g)
        bus_id = f"00000000:{bus}:00.0"
        gi.set("id", bus_id)
        _set(gi, "pci/pci_bus_id", bus_id)
        _set(gi, "pci/pci_bus", bus)
        _set(gi, "minor_number", str(i))
        _set(gi, "uuid", f"GPU-{i:08d}-0000-0000-0000-{i:012d}")
        root.append(gi)
    return root


def xml_text(root: ET.Element) -> str:
    body = ET.tostring(root, encoding="unicode")
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
        "<!-- made by tests/doctor/doctor_fixtures.py from real captures: see its docstring -->\n"
        + body
        + "\n"
    )


def nvlink_text(n: int = 8, down: dict[int, int] | None = None) -> str:
    """The H100 capture's ``nvlink -s`` repeated per GPU; ``down``: {gpu: link} shown ``<inactive>``
    (the driver's word for a link that is down)."""
    lines = (CAPTURES / "h100_nvlink_s.txt").read_text().splitlines()
    out = []
    for i in range(n):
        out.append(lines[0].replace("GPU 0:", f"GPU {i}:").replace("0000-000000000000", f"0000-{i:012d}"))
        for line in lines[1:]:
            if down and down.get(i) is not None and line.strip().startswith(f"Link {down[i]}:"):
                line = line.split(":")[0] + ": <inactive>"
            out.append(line)
    return "\n".join(out) + "\n"


KERNEL_BOOT = [
    "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) #45-Ubuntu SMP",
    "[    5.210331] nvidia: loading out-of-tree module taints kernel.",
    "[    5.402117] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  590.48.01",
    "[    6.881022] nvidia-nvswitch: Probing device 0000:05:00.0",
]


def xid_line(bus: str, xid: int, rest: str) -> str:
    """As the driver logs it (NVIDIA's Xid catalog shows ``NVRM: Xid (PCI:0000:xx:00): N, ...``)."""
    return f"[ 8123.456789] NVRM: Xid (PCI:0000:{bus.lower()}:00): {xid}, pid=4242, name=python, {rest}"


def torch_package(cuda: str | None) -> dict[str, str]:
    """A stand-in ``torch`` package: its version.py as a CUDA (or CPU) wheel writes it, and the two
    calls the doctor makes; the real torch of the tests' venv is CPU-only."""
    build = f"cu{cuda.replace('.', '')}" if cuda else "cpu"
    version = (
        f"from typing import Optional\n__all__ = ['__version__', 'cuda']\n__version__ = '2.5.1+{build}'\n"
        f"debug = False\ncuda: Optional[str] = {cuda!r}\nhip: Optional[str] = None\n"
    )
    init = (
        "from torch import version\n__version__ = version.__version__\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return version.cuda is not None\n"
        "    @staticmethod\n    def device_count():\n        return 8 if version.cuda else 0\n"
    )
    return {"version.py": version, "__init__.py": init}


def fake_measure(gemm: tuple[float, ...] = CLEAN_GEMM, allreduce: float = 471.0) -> dict[str, Any]:
    rows = [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "gemm_tflops": t,
            "copy_tbs": 2.95 + i * 0.005,
            "mem_gib": 66.0,
            "mem_errors": 0,
        }
        for i, t in enumerate(gemm)
    ]
    return {"gpus": rows, "allreduce_gbs": allreduce}


@dataclass
class Case:
    """One box state: what each fake answers, and the check it must produce."""

    name: str
    xml: str | None  # None: no NVIDIA driver (no nvidia-smi on the PATH); "HANG": nvidia-smi hangs
    nvlink: str = ""
    kernel: list[str] | None = field(default_factory=lambda: list(KERNEL_BOOT))  # None: unreadable
    torch_cuda: str | None = "12.4"
    measure: dict[str, Any] = field(default_factory=fake_measure)
    env: dict[str, str] = field(default_factory=dict)
    dcgm: str | None = None  # dcgmi diag -j output; None: DCGM not installed
    expected_gpus: int | None = 8
    expect: tuple[str, str, int | None] | None = None  # (check, status, gpu)


def make_case(name: str, edit: Any = None, **kw: Any) -> Case:
    root = h100_box()
    if edit is not None:
        edit(root)
    return Case(name, xml_text(root), nvlink=kw.pop("nvlink", nvlink_text()), **kw)


def gpu(root: ET.Element, i: int) -> ET.Element:
    return root.findall("gpu")[i]


FAKE_DMESG = """#!/bin/sh
if [ -e "$HOME/fake/kmsg.denied" ]; then
  echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1
fi
cat "$HOME/fake/kmsg"
"""
FAKE_JOURNALCTL = """#!/bin/sh
if [ -e "$HOME/fake/kmsg.denied" ]; then
  echo "No journal files were opened due to insufficient permissions." >&2; exit 1
fi
cat "$HOME/fake/kmsg"
"""
FAKE_DCGMI = """#!/bin/sh
cat "$HOME/fake/dcgm.json"
grep -qi '"status": *"fail' "$HOME/fake/dcgm.json" && exit 226
exit 0
"""


def install_fakes(h: Any, case: Case, apps: str | None = None) -> Path:
    """Write ``case`` onto test host ``h`` (an sshd.SSHHost): its ~/fake files, the fake tools in ~/bin,
    and the fake torch in ~/fake/site (put it on PYTHONPATH through the host entry's env). Returns ~/fake."""
    fake = h.home / "fake"
    (fake / "site" / "torch").mkdir(parents=True, exist_ok=True)
    files = {
        "smi.xml": case.xml or "",
        "nvlink.txt": case.nvlink,
        "kmsg": "\n".join(case.kernel or []) + "\n",
        "measure.json": json.dumps(case.measure),
        "dcgm.json": case.dcgm or "",
    }
    for name, text in files.items():
        (fake / name).write_text(text)
    for name, text in torch_package(case.torch_cuda).items():
        (fake / "site" / "torch" / name).write_text(text)
    denied = fake / "kmsg.denied"
    if case.kernel is None:
        denied.write_text("")
    elif denied.exists():
        denied.unlink()
    for p in [fake, *fake.rglob("*")]:
        os.chown(p, h.uid, -1)
    smi = h.home / "bin" / "nvidia-smi"
    if case.xml is None:
        smi.unlink(missing_ok=True)
    else:
        h.install_bin(
            "nvidia-smi",
            fake_smi.script(
                gpus=8, python=h.python, xml=str(fake / "smi.xml"), nvlink=str(fake / "nvlink.txt"), apps=apps
            ),
        )
    h.install_bin("dmesg", FAKE_DMESG)
    h.install_bin("journalctl", FAKE_JOURNALCTL)
    if case.dcgm is None:
        (h.home / "bin" / "dcgmi").unlink(missing_ok=True)
    else:
        h.install_bin("dcgmi", FAKE_DCGMI)
    return fake


def host_env(fake: Path, case: Case) -> dict[str, str]:
    """The host entry's env for ``case``: the fake torch first on PYTHONPATH, the fake measurements."""
    return {
        "PYTHONPATH": str(fake / "site"),
        "PIPPA_DOCTOR_FAKE_MEASURE": str(fake / "measure.json"),
        **case.env,
    }
