"""``pippa run --failover``: a run whose host faults its GPU moves on its own, when ``pippa wait`` sees it,
to the first healthy host of the list (one with a failed doctor verdict passed over), between loopback
OpenSSH hosts in real tmux with the real trainer. The GPU fault is the kernel's own Xid line, printed by
a ``dmesg`` on the faulting host's PATH when the trainer dies (no GPU here)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from test_restart_ssh import SETS, STEPS, pippa, started, steps, trainer_pid, wait_for

from pippa_contract.doctor import history_name

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

XID_DMESG = """#!/bin/sh
up=$(cut -d' ' -f1 /proc/uptime)
echo "[$up] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
"""


def _put(h: object, rel: str, text: str, mode: int) -> None:
    path = h.home / rel  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    for made in [Path(rel), *list(Path(rel).parents)[:-1]]:  # the file and the folders made for it
        os.chown(h.home / made, h.uid, -1)  # type: ignore[attr-defined]


def test_a_gpu_fault_moves_the_run_to_the_first_healthy_failover_host(client_env, ssh_hosts) -> None:
    env, a, b, c = client_env.env, ssh_hosts[2], ssh_hosts[3], ssh_hosts[1]
    assert pippa(env, "sync", b.name, timeout=300).returncode == 0
    fail = {
        "host": c.name,
        "verdict": "fail",
        "measured": {},
        "time": time.time(),
        "quick": True,
        "checks": [{"check": "xid", "status": "fail", "gpu": 0, "detail": "Xid 79"}],
    }
    _put(c, f"pippa/doctor/{history_name(time.time(), 1)}", json.dumps(fail), 0o644)
    _put(a, "bin/dmesg", XID_DMESG, 0o755)

    bad = pippa(env, "run", "tiny", "--host", a.name, "--failover", "nowhere")
    assert bad.returncode != 0 and "nowhere" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

    run_id = started(
        pippa(
            env, "run", "tiny", "--host", a.name, "--name", "fover", "--failover", f"{c.name},{b.name}", *SETS
        )
    )
    old_dir, new_dir = a.home / "pippa" / "runs" / run_id, b.home / "pippa" / "runs" / run_id
    ck = old_dir / "checkpoints" / "checkpoint-2"
    log = old_dir / "output.log"
    wait_for(lambda: ck.is_dir() and max(steps(old_dir), default=0) >= 3, 300, lambda: log.read_text()[-999:])
    pid = trainer_pid(run_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the GPU fell off the bus: the trainer dies, the kernel says why

    p = pippa(env, "wait", run_id, "--host", a.name, timeout=600)
    assert p.returncode == 0, p.stderr
    said = [ln for ln in p.stderr.splitlines() if "failover" in ln]
    assert len(said) == 1 and f"from {a.name} to {b.name}" in said[0] and "gpu-fault" in said[0], p.stderr
    doc = json.loads((old_dir / "attempts.json").read_text())
    assert doc["attempts"][-1]["class"] == "gpu-fault"
    assert (new_dir / "exit_code").read_text() == "0\n"
    assert steps(new_dir) == list(range(1, STEPS + 1))
    record = json.loads((new_dir / "run.json").read_text())
    assert record["host"] == b.name and record["failover"]["from"] == a.name
    assert record["failover"]["to"] == b.name and record["failover"]["health"] == "no doctor verdict yet"
    assert (old_dir / "moved_to").read_text() == b.name + "\n"
    assert not (c.home / "pippa" / "runs" / run_id).exists()  # its failed doctor verdict passed it over


SMI_BUS_IDS = """#!/bin/sh
case "$*" in
  *index,pci.bus_id*) for row in 0:18 1:3B 2:86 3:AF; do echo "${row%%:*}, 00000000:${row#*:}:00.0"; done ;;
  *) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9 ;;
esac
"""


def test_a_gpu_fault_of_a_pinned_run_offers_the_other_gpus_and_resume_takes_them(
    client_env, ssh_hosts
) -> None:
    env, a = client_env.env, ssh_hosts[2]
    _put(a, "bin/dmesg", XID_DMESG, 0o755)  # Xid 79 on PCI:0000:3b:00: GPU 1 by nvidia-smi's bus ids
    _put(a, "bin/nvidia-smi", SMI_BUS_IDS, 0o755)
    run_id = started(pippa(env, "run", "tiny", "--host", a.name, "--name", "gpin", "--gpus", "0-3", *SETS))
    run_dir = a.home / "pippa" / "runs" / run_id
    ck, log = run_dir / "checkpoints" / "checkpoint-2", run_dir / "output.log"
    wait_for(lambda: ck.is_dir() and max(steps(run_dir), default=0) >= 3, 300, lambda: log.read_text()[-999:])
    pid = trainer_pid(run_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (run_dir / "exit_code").exists(), 120, lambda: log.read_text()[-999:])

    offer = f"pippa resume {run_id} --gpus 0,2,3"
    last = json.loads((run_dir / "attempts.json").read_text())
    assert last["attempts"][-1]["gpu_index"] == 1 and offer in last["event"]["message"]  # the alert's line
    why = pippa(env, "why", run_id, "--host", a.name)
    assert why.returncode == 0 and f"next: pippa resume {run_id} --host {a.name} --gpus 0,2,3" in why.stdout
    assert not (run_dir / "moved_to").exists() and steps(run_dir)[-1] < STEPS  # offered, never taken

    bad = pippa(env, "resume", run_id, "--gpus", "0,2,3", "--on", ssh_hosts[3].name)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    r = pippa(env, "resume", run_id, "--host", a.name, "--gpus", "0,2,3")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: _gpus_set(run_id) is not None, 120, lambda: log.read_text()[-999:])
    assert _gpus_set(run_id) == "0,2,3"  # the last launch.gpus the trainer got (no GPU here to pin)
    (a.home / "bin" / "dmesg").unlink()  # no fault on the resumed attempt's end
    done = pippa(env, "wait", run_id, "--host", a.name, timeout=600)
    assert done.returncode == 0, done.stderr + log.read_text()[-2000:]
    assert steps(run_dir) == list(range(1, STEPS + 1))


def _gpus_set(run_id: str) -> str | None:
    """The last ``launch.gpus`` setting of the run's trainer process (None until it runs)."""
    pid = trainer_pid(run_id)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if pid else []
    except OSError:
        return None
    found = [a.split("=", 1)[1].strip('"') for a in argv if a.startswith("launch.gpus=")]
    return found[-1] if found else ("" if pid else None)


def test_a_failover_runs_host_that_stays_unreachable_ends_the_wait_for_the_move(ssh_env, ssh_hosts) -> None:
    from pippa_ops.hosts.inventory import resolve
    from pippa_ops.runs.reading.wait import HostStaysLost, wait_run
    from pippa_ops.runs.records.listing import RunRecord

    a = ssh_hosts[1]
    rec = RunRecord(a.name, "20261126-000000-tiny-lost", "l", "tiny", "x", "running", failover=("b",))
    a.stop()  # new connections refused: the host is gone as far as the laptop can tell
    try:
        t0 = time.monotonic()
        with pytest.raises(HostStaysLost, match="unreachable for"):
            wait_run(resolve(a.name), rec, lost_after_s=1.0, backoff_s=(0.2,))
        assert time.monotonic() - t0 < 60
    finally:
        a.start()
