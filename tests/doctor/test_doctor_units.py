"""The doctor's pure parts on real captures and small inputs: NVIDIA's XML as two driver generations
write it, the kernel log's Xid lines, the verdict, the floors, the history's names and the refusal."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from pippa_agent.doctor import active, gpu_checks, kernel, smi
from pippa_contract.doctor import check, history_name, is_history_name, verdict
from pippa_ops.doctor import refusal, summary_text

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def _facts(name: str) -> list[dict]:
    return smi.gpu_facts(ET.parse(CAPTURES / name).getroot())


def _not_ok(checks: list) -> list[tuple[str, str, int | None]]:
    return [(c["check"], c["status"], c["gpu"]) for c in checks if c["status"] != "ok"]


def test_the_real_a100_capture_parses_and_its_mig_mode_is_a_fail() -> None:
    (g,) = _facts("a100_sxm4_q_x_v12.xml")  # driver 535, DTD v12, clocks_event_reasons, MIG on
    assert (g["name"], g["bus_id"], g["mig"], g["pcie_gen"], g["pcie_width_max"]) == (
        "NVIDIA A100-SXM4-80GB",
        "00000000:01:00.0",
        "Enabled",
        4.0,
        16.0,
    )
    assert (g["ecc_uncorrected_volatile"], g["temp"], g["temp_slow"], g["remap_pending"]) == (
        0,
        27.0,
        89.0,
        None,
    )
    assert _not_ok(gpu_checks.per_gpu(g)) == [("mig", "fail", 0), ("persistence", "warn", 0)]


def test_the_real_v13_capture_reads_tlimit_and_an_idle_link_trained_down_is_no_alarm() -> None:
    (g,) = _facts("rtx4000_sff_ada_q_x_v13.xml")  # driver 595, DTD v13: T.Limit temperatures
    assert (g["tlimit"], g["tlimit_slow"], g["temp_slow"]) == (49.0, -2.0, None)
    assert (g["pstate"], g["pcie_gen"], g["pcie_gen_max"]) == ("P8", 1.0, 4.0)
    assert g["reasons"]["hw_slowdown"] == "Not Active" and g["ecc_uncorrected_volatile"] is None
    assert _not_ok(gpu_checks.per_gpu(g)) == [("ecc", "warn", 0)]  # ECC off on this workstation card


def test_the_real_h100_capture_from_a_lent_box_is_a_healthy_gpu() -> None:
    """bench/gpu_acceptance.sh's own capture (one H100 SXM, driver 580, DTD v13): every fact the
    checks read is there, and a sound GPU raises nothing."""
    (g,) = _facts("h100_sxm_q_x_v13_lent.xml")
    assert (g["name"], g["ecc_mode"], g["mig"], g["persistence"]) == (
        "NVIDIA H100 80GB HBM3",
        "Enabled",
        "Disabled",
        "Enabled",
    )
    assert (g["pcie_gen"], g["pcie_gen_max"], g["pcie_width"], g["pcie_width_max"]) == (5.0, 5.0, 16.0, 16.0)
    assert (g["ecc_uncorrected_volatile"], g["remap_pending"], g["remap_failure"]) == (0, "No", "No")
    assert set(g["reasons"].values()) == {"Not Active"} and g["mem_total_mib"] == 81559.0
    assert active.model_key(g["name"]) == "H100 SXM"
    assert _not_ok(gpu_checks.per_gpu(g)) == []
    drv, cuda = smi.driver(ET.parse(CAPTURES / "h100_sxm_q_x_v13_lent.xml").getroot())
    assert (drv, cuda) == ("580.159.04", "13.0")


def test_each_per_gpu_check_shows_one_row_when_every_gpu_passes_it_and_none_beside_a_fault() -> None:
    (h100,) = _facts("h100_sxm_q_x_v13_lent.xml")
    gpus = [dict(h100, index=i) for i in range(8)]
    links = {i: [(n, True) for n in range(18)] for i in range(8)}
    rows = gpu_checks.passing(gpus, [], links)
    assert [(c["check"], c["status"], c["gpu"]) for c in rows] == [
        (kind, "ok", None) for kind in gpu_checks.PER_GPU
    ]
    details = {c["check"]: c["detail"] for c in rows}
    assert details["ecc"] == "ECC on, no uncorrectable error since boot on 8 GPUs"
    assert details["nvlink"] == "all 144 NVLinks up on 8 GPUs"
    assert details["pcie"] == "PCIe links at full width and speed on 8 GPUs: Gen5 x16"

    gpus[3] = dict(gpus[3], ecc_uncorrected_volatile=2)  # a fault: its row, and no ecc summary beside it
    faults = [c for g in gpus for c in gpu_checks.per_gpu(g)]
    assert _not_ok(faults) == [("ecc", "fail", 3)]
    assert "ecc" not in {c["check"] for c in gpu_checks.passing(gpus, faults, links)}
    (rtx,) = _facts("rtx4000_sff_ada_q_x_v13.xml")  # no NVLink, ECC off: a skip with its reason, a warn
    rows = gpu_checks.passing([rtx], gpu_checks.per_gpu(rtx), {})
    assert [(c["check"], c["status"]) for c in rows if c["status"] != "ok"] == [("nvlink", "skipped")]
    assert "ecc" not in {c["check"] for c in rows}


def test_the_h100_floor_passes_the_figures_measured_on_healthy_lent_h100s() -> None:
    """The two real GEMM figures (2026-11-26) judged by the floor table: no warning on a sound box."""
    gpus = [{"index": 0, "uuid": "u0"}]
    for tflops in (686.0, 679.3):
        rows = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "gemm_tflops": tflops, "copy_tbs": 3.0}]
        assert _not_ok(active.judge({"gpus": rows}, gpus, nvswitch=False)[0]) == []


def test_older_drivers_throttle_names_and_double_bit_totals_are_read() -> None:
    g = ET.fromstring(
        "<gpu><clocks_throttle_reasons><clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"
        "</clocks_throttle_reasons><ecc_errors><volatile><double_bit><total>3</total></double_bit></volatile>"
        "</ecc_errors></gpu>"
    )
    root = ET.Element("nvidia_smi_log")
    root.append(g)
    (facts,) = smi.gpu_facts(root)
    assert facts["reasons"]["hw_slowdown"] == "Active" and facts["ecc_uncorrected_volatile"] == 3


def test_xid_lines_map_to_gpus_by_pci_address() -> None:
    lines = [
        "[  12.0] NVRM: Xid (PCI:0000:5d:00): 79, pid=1, GPU has fallen off the bus.",
        "[  13.0] NVRM: Xid (PCI:0000:5d:00): 79, pid=1, GPU has fallen off the bus.",
        "[  14.0] NVRM: Xid (PCI:0000:99:00): 13, Graphics Exception",
        "[  15.0] something else",
    ]
    events = kernel.xids(lines)
    assert [(e.pci, e.xid) for e in events] == [("0000:5d:00", 79), ("0000:5d:00", 79), ("0000:99:00", 13)]
    gpus = [{"index": 0, "bus_id": "00000000:18:00.0"}, {"index": 1, "bus_id": "00000000:5D:00.0"}]
    checks = gpu_checks.xid_checks(gpus, events)
    assert _not_ok(checks) == [("xid", "fail", 1), ("xid", "warn", None)]
    assert "(2 times)" in checks[0]["detail"] and "not listed by nvidia-smi" in checks[1]["detail"]


def test_verdict_is_the_worst_status_and_skipped_counts_as_ok() -> None:
    assert verdict([check("a", "ok", ""), check("b", "skipped", "")]) == "ok"
    assert verdict([check("a", "warn", ""), check("b", "ok", "")]) == "warn"
    assert verdict([check("a", "warn", ""), check("b", "fail", "", 3)]) == "fail"
    assert verdict([]) == "ok"


def test_floors_judge_the_slow_gpu_and_unknown_models_only_relatively() -> None:
    rows = [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "gemm_tflops": v, "copy_tbs": 3.0}
        for i, v in enumerate((780.0, 660.0, 781.0))
    ]
    gpus = [{"index": i, "uuid": f"u{i}"} for i in range(3)]
    checks, measured = active.judge({"gpus": rows, "allreduce_gbs": 300.0}, gpus, nvswitch=True)
    assert _not_ok(checks) == [("gemm", "fail", 1), ("allreduce", "fail", None)]  # 15% below; < 0.8 x 460
    assert measured["gpus"]["1"] == {"uuid": "u1", "gemm_tflops": 660.0, "copy_tbs": 3.0}
    unknown = [dict(r, name="Some Future GPU", gemm_tflops=100.0) for r in rows]
    checks, _ = active.judge({"gpus": unknown}, gpus, nvswitch=False)
    assert _not_ok(checks) == []
    low = [dict(r, gemm_tflops=560.0) for r in rows]  # all alike, all below the H100 floor 580
    assert _not_ok(active.judge({"gpus": low}, gpus, nvswitch=False)[0]) == [
        ("gemm", "warn", i) for i in range(3)
    ]
    assert active.model_key("NVIDIA H100 PCIe") == "H100 PCIe" and active.model_key("NVIDIA L40S") is None


def test_history_names_sort_by_time() -> None:
    names = [history_name(t, 7) for t in (1795718985.25, 999.0, 1795718985.5)]
    assert sorted(names) == [names[1], names[0], names[2]] and all(is_history_name(n) for n in names)
    assert not is_history_name("notes.json") and not is_history_name(names[0] + ".tmp-3")


def test_run_is_refused_only_for_a_fail_under_a_day_old() -> None:
    res = {
        "host": "h",
        "verdict": "fail",
        "time": 1000.0,
        "checks": [check("xid", "fail", "x", 1), check("ecc", "fail", "y", 2), check("xid", "fail", "z", 3)],
    }
    r = refusal(res, now=1000.0 + 3 * 3600)
    assert r is not None and r.checks == ("xid", "ecc")
    assert r.line() == (
        "h: its last `pippa doctor` (3h ago) failed xid, ecc: fix the box and run "
        "`pippa doctor h` again, or start anyway with --force"
    )
    assert refusal(res, now=1000.0 + 86401) is None
    assert refusal(dict(res, verdict="warn"), now=1001.0) is None and refusal(None) is None
    assert (
        summary_text({"verdict": "fail", "failed": ["xid"], "time": 0.0}, now=120.0)
        == "doctor fail (xid) 2m ago"
    )


def test_the_health_watch_alerts_once_per_new_xid_or_ecc_error_during_a_run() -> None:
    from pippa_agent.doctor.watch import GpuHealthWatch

    gpus = [{"index": 5, "bus_id": "00000000:AB:00.0", "uuid": "u5", "ecc_uncorrected_volatile": 0}]
    old = "[  10.000000] NVRM: Xid (PCI:0000:ab:00): 31, pid=9, MMU Fault"
    new = "[ 500.000000] NVRM: Xid (PCI:0000:ab:00): 79, pid=9, GPU has fallen off the bus."
    w = GpuHealthWatch()
    assert w.sample(["boot", old], gpus, "tiny-a3f9", boot=0.0) == []  # the baseline: never an alert
    (alert,) = w.sample(["boot", old, new], gpus, "tiny-a3f9", boot=0.0)
    assert alert[0] == "GPU 5" and alert[1].startswith("GPU 5: GPU fault: Xid 79 (fallen off the bus) at ")
    assert alert[1].endswith(" during run tiny-a3f9")
    assert w.sample(["boot", old, new], gpus, "tiny-a3f9", boot=0.0) == []  # the same line: once
    later = "[ 900.000000] NVRM: Xid (PCI:0000:ab:00): 48, pid=9, DBE"
    assert w.sample(["boot", old, new, later], gpus, None) == []  # no run active: no alert
    worse = [dict(gpus[0], ecc_uncorrected_volatile=2)]
    (ecc,) = w.sample(["boot", old, new, later], worse, "tiny-a3f9")
    assert ecc[1].startswith("GPU 5: 2 new uncorrectable ECC error(s) at ")


def test_quick_torch_facts_are_cached_per_python_until_what_it_imports_changes(tmp_path: Path) -> None:
    from doctor_fixtures import torch_package

    from pippa_agent.doctor import system

    def install(cuda: str | None) -> None:
        (tmp_path / "site" / "torch").mkdir(parents=True, exist_ok=True)
        for name, text in torch_package(cuda).items():
            (tmp_path / "site" / "torch" / name).write_text(text)

    install("12.4")
    env, cache = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}, str(tmp_path / "torch.json")
    first = system.torch_facts([sys.executable], env, full=False, cache=cache)
    assert (first["cuda"], first["error"]) == ("12.4", None) and "files" not in first
    stored = json.loads(Path(cache).read_text())
    (entry,) = stored.values()
    entry["facts"]["torch"] = "from-the-cache"  # while nothing changed, the cache answers (no python start)
    Path(cache).write_text(json.dumps(stored))
    assert system.torch_facts([sys.executable], env, full=False, cache=cache)["torch"] == "from-the-cache"
    assert system.torch_facts([sys.executable], env, full=True, cache=cache)["torch"] != "from-the-cache"
    install(None)  # a CPU-only torch installed over it: its version.py changed, so the python is asked
    assert system.torch_facts([sys.executable], env, full=False, cache=cache)["cuda"] is None


def test_the_disk_check_warns_below_a_floor_sized_from_the_hosts_checkpoints(tmp_path: Path) -> None:
    from pippa_agent.doctor.disk_floor import HEADROOM_MIN, checkpoint_floor
    from pippa_agent.doctor.system import DISK_FAIL_FREE_GIB, DISK_WARN_PCT, disk_checks
    from pippa_contract.checkpoint_check import MANIFEST

    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    used_pct = 100 * (st.f_blocks - st.f_bfree) / st.f_blocks
    fine = free > DISK_FAIL_FREE_GIB * 1024**3 and used_pct < DISK_WARN_PCT  # the fixed rules pass
    if fine:  # no run, no checkpoint: no floor
        assert [c["status"] for c in disk_checks(str(tmp_path), {"HF_HOME": str(tmp_path)})] == ["ok"]
    run = tmp_path / "runs" / "20261129-000000-tiny-ab12"
    ckpt = run / "checkpoints" / "checkpoint-4"
    ckpt.mkdir(parents=True)
    size = free // 3 + 1  # a checkpoint as large as a third of what is free: three of them do not fit
    (ckpt / MANIFEST).write_text(json.dumps({"version": 1, "files": {"model.safetensors": {"size": size}}}))
    header = {"type": "header", "config": {"checkpoint": {"keep": 3}}}
    (run / "metrics.jsonl").write_text(json.dumps(header) + "\n")
    floor = checkpoint_floor(str(tmp_path / "runs"))
    assert floor is not None and floor[0] == 3 * size + max(HEADROOM_MIN, 3 * size // 10)
    assert floor[1].startswith(f"{run.name}'s checkpoint-4 ") and "x checkpoint.keep 3 + headroom" in floor[1]
    if fine:  # a disk the fixed rules pass: only the floor speaks
        (disk,) = disk_checks(str(tmp_path), {"HF_HOME": str(tmp_path)})
        assert disk["status"] == "warn" and "this host's runs need" in disk["detail"], disk
