"""The nvidia-smi parser on real captured outputs (tests/fixtures/nvidia-smi/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pippa_ops import gpu
from pippa_ops.transport.base import LocalTransport

FIX = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"


def as_list(query_fields: str) -> list[str]:
    """The ``--query-gpu=`` list exactly as SOURCES.md records it."""
    return query_fields.split(",")


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_h100_under_load_parses_through_the_header_aware_path() -> None:
    (g,) = gpu.parse_gpus_csv(read("h100_load_query_gpu_full.csv"))
    assert (g.index, g.name) == (0, "NVIDIA H100 80GB HBM3")
    assert (g.util_pct, g.mem_used_mib, g.mem_total_mib) == (100.0, 19818.0, 81559.0)
    assert (g.temp_c, g.power_w, g.power_limit_w, g.driver) == (59.0, 631.95, 700.0, "590.48.01")
    assert g.mem_pct == pytest.approx(24.3, abs=0.1)


def test_h100_compute_processes_attach_to_their_gpu_by_uuid() -> None:
    gpus = gpu.parse_gpus_csv(read("h100_load_query_gpu_full.csv"))
    apps = gpu.parse_apps(read("h100_load_compute_apps.csv"), header=True)
    (g,) = gpu.attach_processes(gpus, apps)
    assert [(p.pid, p.name, p.used_mib) for p in g.processes] == [
        (11327, "/root/tools/memhog", 2566.0),
        (11328, "/root/tools/memhog", 1542.0),
        (11345, "./gpu_burn", 15690.0),
    ]
    assert gpu.parse_apps(read("h100_idle_compute_apps.csv"), header=True) == []


def test_not_supported_fields_become_none_not_zero() -> None:
    fields = as_list(
        "name,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,fan.speed,pstate,"
        "clocks.current.graphics,clocks.current.memory,power.max_limit,power.default_limit"
    )
    (g,) = gpu.parse_gpus(read("gtx770_not_supported.csv"), fields)
    assert g.name == "GeForce GTX 770"
    assert (g.util_pct, g.power_w, g.power_limit_w) == (None, None, None)
    assert g.temp_c == 52.0


def test_bare_na_of_older_drivers_and_nounits_values() -> None:
    fields = as_list(
        "power.limit,power.min_limit,power.max_limit,memory.total,vbios_version,driver_version,name,gpu_uuid,"
        "power.draw,temperature.gpu,temperature.memory,clocks.current.graphics,clocks.sm,clocks.mem,"
        "utilization.gpu,utilization.memory,fan.speed,pcie.link.width.current,pstate"
    )
    (g,) = gpu.parse_gpus(read("rtx2080_na_nounits.csv"), fields)
    assert (g.name, g.driver, g.uuid) == (
        "GeForce RTX 2080",
        "440.64",
        "GPU-22b2c6ac-2d49-4863-197c-9c469071178a",
    )
    assert (g.power_w, g.power_limit_w, g.mem_total_mib, g.util_pct, g.temp_c) == (
        176.98,
        200.0,
        7979.0,
        86.0,
        45.0,
    )
    assert g.mem_used_mib is None  # not queried: unknown, not zero
    assert gpu.number("N/A") is None and gpu.number("[N/A]") is None and gpu.number("[Not Supported]") is None


def test_several_gpus_give_one_row_each() -> None:
    gpus = gpu.parse_gpus(read("three_gpus_power_draw.csv"), ["power.draw"])
    assert [g.power_w for g in gpus] == [133.91, 189.84, 104.34]


def test_pippa_query_is_the_documented_command() -> None:
    argv = gpu.query_argv()
    assert argv[0] == "nvidia-smi"
    assert argv[1].startswith(
        "--query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,"
    )
    assert argv[2] == "--format=csv,noheader,nounits"
    assert gpu.query_argv(5)[-2:] == ["-l", "5"]


def test_a_host_without_nvidia_smi_says_so_in_one_line() -> None:
    report = gpu.query(LocalTransport())  # this test machine has no GPU and no nvidia-smi
    assert report.gpus == ()
    assert report.unavailable == "local: no NVIDIA GPU (nvidia-smi not found)"


def test_a_driver_failure_is_reported_not_parsed_as_a_gpu() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n@@pippa-apps@@\n"
    report = gpu.parse_report("h", text)
    assert (
        report.gpus == () and report.unavailable is not None and "couldn't communicate" in report.unavailable
    )
