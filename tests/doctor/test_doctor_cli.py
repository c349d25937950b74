"""`pippa doctor` and the commands that read its verdict, as a user runs them, on loopback sshd hosts:
tables and verdicts for several hosts at once, the odd hosts (unknown, unreachable) as one line each,
--json, --history; `pippa run` refused on a failed box (and --force), the busy-GPU warning."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA
from doctor_fixtures import BUS_IDS, KERNEL_BOOT, host_env, install_fakes, make_case, xid_line
from projects import make_project

pytestmark = pytest.mark.ssh
CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def pippa(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def entry_fields(client_env: Any, name: str, fields: dict[str, Any]) -> None:
    """Add fields to host ``name``'s table in the client's hosts.toml (gpus, env)."""
    path = client_env.personal_inventory
    lines = [f"{k} = {json.dumps(v) if not isinstance(v, dict) else _inline(v)}" for k, v in fields.items()]
    path.write_text(
        path.read_text().replace(f"[hosts.{name}]\n", f"[hosts.{name}]\n" + "\n".join(lines) + "\n")
    )


def _inline(d: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + " }"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_project(tmp_path / "repo")


def test_doctor_prints_a_table_per_host_and_one_line_for_each_odd_host(client_env, ssh_hosts, repo) -> None:
    h1, h2, h3 = ssh_hosts[0], ssh_hosts[1], ssh_hosts[2]
    clean = make_case("clean")
    entry_fields(client_env, h1.name, {"gpus": 8, "env": host_env(install_fakes(h1, clean), clean)})
    xid = make_case("xid79", kernel=[*KERNEL_BOOT, xid_line(BUS_IDS[3], 79, "GPU has fallen off the bus.")])
    entry_fields(client_env, h2.name, {"env": host_env(install_fakes(h2, xid), xid)})
    h3.stop()
    p = pippa(client_env.env, repo, "doctor", "--quick", h1.name, h2.name, h3.name, "no-such-host")
    out = p.stdout
    assert f"{h1.name}: verdict ok (0 failed, 0 warning(s); passive checks only (--quick))" in out
    assert f"{h2.name}: verdict fail (1 failed" in out and "GPU 3: Xid 79 (fallen off the bus)" in out
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(err) == 2 and any(line.startswith(f"{h3.name}: ") for line in err), p.stderr
    assert any("no-such-host" in line for line in err) and "Traceback" not in p.stderr
    assert p.returncode == 4  # an unreachable host: the usual code (UNREACHABLE)

    p = pippa(client_env.env, repo, "doctor", "--quick", "--json", h1.name, h2.name)
    assert p.returncode == 1  # one host failed a check
    results = json.loads(p.stdout)
    assert [(r["host"], r["verdict"]) for r in results] == [(h1.name, "ok"), (h2.name, "fail")]
    bad = [(c["check"], c["status"], c["gpu"]) for c in results[1]["checks"] if c["status"] != "ok"]
    assert bad == [("xid", "fail", 3)]

    p = pippa(client_env.env, repo, "hosts")  # each host's last verdict and its age
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.split()}
    assert "doctor ok " in rows[h1.name] and "doctor fail (xid) " in rows[h2.name] and " ago" in rows[h2.name]
    assert "doctor" not in rows[h3.name]

    p = pippa(client_env.env, repo, "doctor", "--history", h2.name)
    assert p.returncode == 0 and "fail (quick)" in p.stdout and "xid" in p.stdout


def test_run_refuses_a_host_whose_last_verdict_is_fail_and_force_starts_it(
    client_env, ssh_hosts, repo
) -> None:
    h = ssh_hosts[0]
    case = make_case("xid79", kernel=[*KERNEL_BOOT, xid_line(BUS_IDS[0], 79, "GPU has fallen off the bus.")])
    apps = str(CAPTURES / "h100_load_compute_apps.csv")
    fake = install_fakes(h, case, apps=apps)
    entry_fields(client_env, h.name, {"env": host_env(fake, case)})
    assert pippa(client_env.env, repo, "doctor", "--quick", h.name).returncode == 1

    p = pippa(client_env.env, repo, "run", "--host", h.name, "--name", "dr", "--cmd", "echo hi")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0, p.stderr  # one line
    assert "failed xid" in p.stderr and "--force" in p.stderr

    p = pippa(client_env.env, repo, "run", "--host", h.name, "--name", "dr", "--cmd", "echo hi", "--force")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("started ")
    assert "--force: starting anyway" in p.stderr
    busy = [line for line in p.stderr.splitlines() if "already runs" in line]
    # the fake's 8 GPUs share the capture's one uuid, so its 3 processes show on each GPU
    assert (
        len(busy) == 8 and "GPU 0 already runs pid 11327 /root/tools/memhog (2566 MiB), pid 11328" in busy[0]
    )


def test_busy_lines_name_only_the_gpus_the_run_will_use() -> None:
    from pippa_ops.gpu import Gpu, GpuProcess, GpuReport
    from pippa_ops.hosts.inventory import HostSpec
    from pippa_ops.runs.launching.health import busy_lines, gpu_ids

    proc = (GpuProcess(7, "python", 1024.0),)
    report = GpuReport("h", tuple(Gpu(i, "H100", processes=proc if i in (1, 5) else ()) for i in range(8)))
    assert gpu_ids("0-2,5") == {0, 1, 2, 5} and gpu_ids(None) is None and gpu_ids("x") is None
    lines = busy_lines(HostSpec("h"), report, "2-4")
    assert lines == []
    lines = busy_lines(HostSpec("h"), report, "0,5")
    assert lines == [
        "h: GPU 5 already runs pid 7 python (1024 MiB): the new run will share it (pippa gpus shows them)"
    ]
    assert len(busy_lines(HostSpec("h"), report, None)) == 2
