"""Each fault a rented GPU box shows, alone, on one loopback sshd host: the doctor names it with the
right status and GPU index, and the clean 8 x H100 box gives ``ok`` with no warning.

One host and one SSH connection replay every case (the fakes re-read their files on each call): the
agent, its subprocesses, the fake nvidia-smi/dmesg/dcgmi and the active program's fake-measurement
hook are real processes on the host; only the GPU's answers are canned (tests/doctor/doctor_fixtures.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sshd
from doctor_fixtures import (
    BUS_IDS,
    CLEAN_GEMM,
    KERNEL_BOOT,
    Case,
    fake_measure,
    gpu,
    h100_box,
    host_env,
    install_fakes,
    make_case,
    nvlink_text,
    xid_line,
    xml_text,
)

from pippa_agent.doctor.gpu_checks import PER_GPU
from pippa_ops import doctor
from pippa_ops.hosts.inventory import HostSpec

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[2]
BOX_DIR = "doctor-box"  # the cases' remote_dir on the host: their own, removed after the module


def _xid(n: int, gpu_index: int, rest: str) -> list[str]:
    return [*KERNEL_BOOT, xid_line(BUS_IDS[gpu_index], n, rest)]


def _slow(i: int) -> tuple[float, ...]:
    return tuple(v * 0.8 if k == i else v for k, v in enumerate(CLEAN_GEMM))


def _edit(i: int, path: str, value: str) -> Any:
    def apply(root: Any) -> None:
        el = gpu(root, i).find(path)
        assert el is not None, path
        el.text = value

    return apply


def _drop_last(root: Any) -> None:
    root.remove(root.findall("gpu")[-1])


DCGM_FAIL = (
    '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
    '[{"name": "GPU Memory", "results": [{"gpu_id": "3", "status": "Fail", "test_name": "memory"}]}]}]}}'
)

FAULTS: list[Case] = [
    make_case("xid79", kernel=_xid(79, 3, "GPU has fallen off the bus."), expect=("xid", "fail", 3)),
    make_case("xid48", kernel=_xid(48, 1, "An uncorrectable double bit error"), expect=("xid", "fail", 1)),
    make_case(
        "xid63", kernel=_xid(63, 2, "Row remapper: new row marked for remapping"), expect=("xid", "warn", 2)
    ),
    make_case("xid64", kernel=_xid(64, 6, "Row remapper: failed to remap"), expect=("xid", "fail", 6)),
    make_case("xid94", kernel=_xid(94, 4, "Contained: SM (0x1)"), expect=("xid", "warn", 4)),
    make_case(
        "xid31", kernel=_xid(31, 0, "Ch 00000008, intr 00000000. MMU Fault"), expect=("xid", "warn", 0)
    ),
    make_case(
        "ecc_uncorrectable",
        _edit(3, "ecc_errors/volatile/dram_uncorrectable", "2"),
        expect=("ecc", "fail", 3),
    ),
    make_case(
        "remap_pending", _edit(4, "remapped_rows/remapped_row_pending", "Yes"), expect=("remap", "warn", 4)
    ),
    make_case(
        "remap_failed", _edit(1, "remapped_rows/remapped_row_failure", "Yes"), expect=("remap", "fail", 1)
    ),
    make_case(
        "hw_slowdown",
        _edit(6, "clocks_event_reasons/clocks_event_reason_hw_slowdown", "Active"),
        expect=("throttle", "fail", 6),
    ),
    make_case(
        "thermal",
        _edit(7, "clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown", "Active"),
        expect=("throttle", "fail", 7),
    ),
    make_case("too_hot", _edit(0, "temperature/gpu_temp", "91 C"), expect=("temperature", "fail", 0)),
    make_case(
        "pcie_x8",
        _edit(2, "pci/pci_gpu_link_info/link_widths/current_link_width", "8x"),
        expect=("pcie", "fail", 2),
    ),
    make_case(
        "pcie_gen3",
        _edit(5, "pci/pci_gpu_link_info/pcie_gen/current_link_gen", "3"),
        expect=("pcie", "warn", 5),
    ),
    make_case("nvlink_down", nvlink=nvlink_text(down={4: 7}), expect=("nvlink", "fail", 4)),
    make_case("seven_of_eight", _drop_last, nvlink=nvlink_text(7), expect=("gpu_count", "fail", None)),
    make_case("mig_on", _edit(2, "mig_mode/current_mig", "Enabled"), expect=("mig", "fail", 2)),
    make_case("nccl_p2p_disable", env={"NCCL_P2P_DISABLE": "1"}, expect=("env", "fail", None)),
    make_case("cpu_only_torch", torch_cuda=None, expect=("torch", "fail", None)),
    make_case(
        "driver_too_old",
        lambda root: root.find("cuda_version").__setattr__("text", "11.8"),
        expect=("driver", "fail", None),
    ),
    make_case("slow_gpu_gemm", measure=fake_measure(_slow(5)), expect=("gemm", "fail", 5)),
    make_case("dcgm_fail", dcgm=DCGM_FAIL, expect=("dcgm", "fail", None)),
    make_case("disk_95", expect=("disk", "fail", None)),
    make_case("shm_64mb", expect=("shm", "fail", None)),
]


@contextlib.contextmanager
def tmpfs(size: str, fill_to: float, owner: int) -> Iterator[Path]:
    """A real small file system (root mounts a tmpfs), filled to ``fill_to`` of its size."""
    d = Path(tempfile.mkdtemp(prefix="pippa-doctor-fs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(d)], check=True)
    try:
        import os

        st = os.statvfs(d)
        if fill_to:
            with open(d / "filler", "wb") as f:
                f.write(b"\0" * int(st.f_blocks * st.f_frsize * fill_to))
        os.chown(d, owner, -1)
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
        d.rmdir()


@pytest.fixture(scope="module")
def box(ssh_world: sshd.World) -> Iterator[tuple[sshd.SSHHost, Any, HostSpec]]:
    """The first test host, its SSH connection (opened once), and a host entry for it."""
    from pippa_ops.hosts.connect import direct_transport
    from pippa_ops.hosts.inventory import resolve

    h = ssh_world.hosts[0]
    h.start()
    mp = pytest.MonkeyPatch()
    for k, v in sshd.client_vars(ssh_world.client_template).items():
        mp.setenv(k, v)
    try:
        spec = resolve(h.name)
        with direct_transport(spec) as transport:
            assert transport.run("true").ok  # connect now, while HOME is the client's (known_hosts)
            yield h, transport, spec
    finally:
        mp.undo()
        for tool in (h.home / "bin").glob("*"):
            tool.unlink()
        shutil.rmtree(h.home / BOX_DIR, ignore_errors=True)  # its doctor results and training code


def run_case(
    box: Any,
    case: Case,
    *,
    remote_dir: str | None = None,
    shm_dir: str | None = None,
    smi_timeout: float | None = None,
    quick: bool = False,
    keep_history: bool = False,
) -> dict[str, Any]:
    h, transport, spec = box
    fake = install_fakes(h, case)
    rd = remote_dir or str(h.home / BOX_DIR)
    if not keep_history:  # each case alone: no earlier figures to regress from
        shutil.rmtree(Path(rd) / "doctor", ignore_errors=True)
    code = Path(rd) / "training_core"  # the part of the synced tree the active checks run
    if not code.exists():
        (code / "hardware").mkdir(parents=True)
        for name in ("__init__.py", "hardware/__init__.py", "hardware/doctor_active.py"):
            (code / name).write_text((REPO / "training_core" / name).read_text())
        subprocess.run(["chown", "-R", h.user, str(Path(rd))], check=True)
    spec = dataclasses.replace(spec, remote_dir=rd, env=host_env(fake, case), gpus=case.expected_gpus)
    return dict(doctor.check_host(spec, transport, quick, smi_timeout=smi_timeout, shm_dir=shm_dir))


def not_ok(res: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(c["check"], c["status"], c["gpu"]) for c in res["checks"] if c["status"] not in ("ok",)]


def test_a_clean_box_of_eight_h100s_is_ok_with_no_warning(box: Any) -> None:
    res = run_case(box, make_case("clean"))
    assert not_ok(res) == [], res["checks"]
    assert res["verdict"] == "ok"
    checks = {c["check"] for c in res["checks"]}
    assert {
        "gpu_count",
        "xid",
        "torch",
        "driver",
        "disk",
        "shm",
        "ulimit",
        "gemm",
        "copy",
        "memory",
        "allreduce",
    } <= checks
    assert len([c for c in res["checks"] if c["check"] == "gemm"]) == 8
    assert res["measured"]["gpus"]["5"]["gemm_tflops"] == CLEAN_GEMM[5]
    # every per-GPU check kind shows as one ok row for the box, not only as faults
    summary = [(c["check"], c["status"]) for c in res["checks"] if c["check"] in PER_GPU]
    assert summary == [(kind, "ok") for kind in PER_GPU], summary
    assert "ECC on, no uncorrectable error since boot on 8 GPUs" in [c["detail"] for c in res["checks"]]


@pytest.mark.parametrize(
    "case", [c for c in FAULTS if c.name not in ("disk_95", "shm_64mb")], ids=lambda c: c.name
)
def test_each_fault_alone_is_named_with_its_status_and_gpu(box: Any, case: Case) -> None:
    res = run_case(box, case)
    found = not_ok(res)
    assert case.expect in found, res["checks"]
    assert all(f[:2] == case.expect[:2] for f in found), found  # nothing else raised (each fault alone)
    assert res["verdict"] == case.expect[1]


def test_a_disk_95_percent_full_fails(box: Any) -> None:
    case = next(c for c in FAULTS if c.name == "disk_95")
    with tmpfs("32m", 0.96, box[0].uid) as d:
        res = run_case(box, case, remote_dir=str(d / "pippa"))
    assert not_ok(res) == [("disk", "fail", None)], res["checks"]


def test_a_64_mb_dev_shm_fails(box: Any) -> None:
    case = next(c for c in FAULTS if c.name == "shm_64mb")
    with tmpfs("64m", 0, box[0].uid) as d:
        res = run_case(box, case, shm_dir=str(d))
    assert not_ok(res) == [("shm", "fail", None)], res["checks"]
    assert "64 MiB" in next(c["detail"] for c in res["checks"] if c["check"] == "shm")


def test_no_driver_is_skipped_or_a_fail_when_the_entry_expects_gpus(box: Any) -> None:
    case = make_case("no_driver", expected_gpus=None)
    case = dataclasses.replace(case, xml=None)
    res = run_case(box, case, quick=True)
    gpus = [c for c in res["checks"] if c["check"] == "gpus"]
    assert [(c["status"], c["detail"]) for c in gpus] == [("skipped", "no NVIDIA driver")]
    res = run_case(box, dataclasses.replace(case, expected_gpus=8), quick=True)
    assert ("gpus", "fail", None) in not_ok(res) and res["verdict"] == "fail"
    h, transport, spec = box  # no gpus = N, but named like a GPU box: a missing driver is no "ok"
    res = run_case((h, transport, dataclasses.replace(spec, name="h100-x")), case, quick=True)
    (gpus,) = [c for c in res["checks"] if c["check"] == "gpus"]
    assert (gpus["status"], res["verdict"]) == ("fail", "fail"), res["checks"]
    assert gpus["detail"] == (
        "no NVIDIA driver, but the host is named like a GPU box (h100): install the "
        "NVIDIA driver, or set gpus = 0 in its entry if it has none"
    )


def test_garbage_or_hanging_nvidia_smi_fails_in_bounded_time(box: Any) -> None:
    import time

    res = run_case(
        box,
        dataclasses.replace(make_case("garbage"), xml="Unable to determine the device handle\n"),
        quick=True,
    )
    smi = [c for c in res["checks"] if c["check"] == "nvidia-smi"]
    assert smi and smi[0]["status"] == "fail" and "Unable to determine" in smi[0]["detail"]
    t0 = time.monotonic()
    res = run_case(box, dataclasses.replace(make_case("hang"), xml="HANG"), quick=True, smi_timeout=2)
    assert time.monotonic() - t0 < 30
    smi = [c for c in res["checks"] if c["check"] == "nvidia-smi"]
    assert smi and smi[0]["status"] == "fail" and "did not answer in 2s" in smi[0]["detail"]


def test_an_unreadable_kernel_log_is_skipped_with_the_reason(box: Any) -> None:
    res = run_case(box, dataclasses.replace(make_case("denied"), kernel=None), quick=True)
    xid = [c for c in res["checks"] if c["check"] == "xid"]
    assert [c["status"] for c in xid] == ["skipped"]
    assert "Operation not permitted" in xid[0]["detail"] and "insufficient permissions" in xid[0]["detail"]


def test_the_xml_made_from_the_captures_parses_as_nvidia_smi_writes_it() -> None:
    root = h100_box()
    text = xml_text(root)
    assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">')
    assert [g.get("id") for g in root.findall("gpu")][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]


def test_history_is_stored_per_run_and_a_gpu_slower_than_its_best_warns(box: Any) -> None:
    h = box[0]
    first = run_case(box, make_case("clean"))
    slower = tuple(v * 0.88 for v in CLEAN_GEMM)  # 12% below the last run, still above the H100 floor
    second = run_case(box, make_case("slower", measure=fake_measure(slower)), keep_history=True)
    stored = sorted((h.home / BOX_DIR / "doctor").glob("*.json"))
    assert [json.loads(p.read_text())["time"] for p in stored] == [first["time"], second["time"]]
    assert not_ok(second) == [("history", "warn", i) for i in range(8)]
    assert "12% below its previous best" in next(
        c["detail"] for c in second["checks"] if c["check"] == "history"
    )
    _, transport, spec = box
    spec = dataclasses.replace(spec, remote_dir=str(h.home / BOX_DIR))
    newest = doctor.history(spec, transport, 5)
    assert [r["time"] for r in newest] == [second["time"], first["time"]]
