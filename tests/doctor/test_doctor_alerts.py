"""The host's alert watcher also watches the GPUs while a run is active: a new Xid line in the (fake)
kernel log produces exactly one alert, naming the GPU, the Xid and the run. Real parts: a loopback sshd
host set up by `pippa up`, the host program's watcher, a real tmux run, Apprise posting to a real HTTP
server on loopback (tests/ops/webhook.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA
from doctor_fixtures import BUS_IDS, host_env, install_fakes, make_case, xid_line
from projects import make_project

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
import webhook

pytestmark = pytest.mark.ssh
TOKEN = "tok-gpu-fault-77"
PROG = ".config/pippa/alerts/agent.pyz"


@pytest.fixture
def hook() -> Iterator[webhook.Webhook]:
    with webhook.serve() as h:
        yield h


def pippa(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def watch_state(h: Any) -> dict[str, Any]:
    try:
        return dict(json.loads((h.home / ".config" / "pippa" / "alerts" / "watch.json").read_text()))
    except (OSError, ValueError):
        return {}


def wait_until(pred: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def fast_fault_polls(h: Any, seconds: float) -> None:
    """Set config.json's ``fault_poll_s`` on the host, as its user would (tmp + rename: the watcher
    re-reads the file when it changes and must never see half of it)."""
    path = h.home / ".config" / "pippa" / "alerts" / "config.json"
    cfg = json.loads(path.read_text())
    tmp = path.with_name("config.json.test-tmp")
    tmp.write_text(json.dumps({**cfg, "fault_poll_s": seconds}))
    os.chown(tmp, h.uid, -1)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def test_a_new_xid_during_a_run_is_one_alert_without_idle_alert(
    client_env, ssh_hosts, hook, tmp_path
) -> None:
    """Alerts configured (PIPPA_NOTIFY), no ``idle_alert``: `pippa up` still starts the watcher (one per
    host user, kept by a second `up`), a new Xid during a run is exactly one alert, and removing
    PIPPA_NOTIFY then `pippa up` stops the watcher."""
    h = ssh_hosts[2]
    repo = make_project(tmp_path / "repo")
    (repo / ".gitignore").write_text(".env\n")
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    case = make_case("clean")
    fake = install_fakes(h, case)
    env_line = ", ".join(f"{k} = {json.dumps(v)}" for k, v in host_env(fake, case).items())
    inv = client_env.personal_inventory
    extra = f"setup = []\nsecrets = []\nenv = {{ {env_line} }}\n"
    inv.write_text(inv.read_text().replace(f"[hosts.{h.name}]\n", f"[hosts.{h.name}]\n{extra}"))
    env = client_env.env
    try:
        up = pippa(env, repo, "up", h.name, "--json")
        assert up.returncode == 0, up.stderr
        pid = json.loads(up.stdout)["alerts"]["watcher"]
        assert isinstance(pid, int), up.stdout
        fast_fault_polls(h, 1.0)
        run = pippa(env, repo, "run", "--host", h.name, "--name", "xidrun", "--cmd", "sleep 120")
        assert run.returncode == 0, run.stderr
        run_id = next(line.split()[1] for line in run.stdout.splitlines() if line.startswith("started "))
        wait_until(lambda: watch_state(h).get("active_run") == run_id)

        with open(fake / "kmsg", "a") as f:  # the driver logs a GPU falling off the bus
            f.write(xid_line(BUS_IDS[5], 79, "GPU has fallen off the bus.") + "\n")
        post = hook.wait_for(lambda p: p.fields.get("state") == "gpu fault", timeout=60)
        name = f"xidrun (cmd, {run_id.rsplit('-', 1)[1]})"  # the run as its user knows it (session, short id)
        assert post.json["title"] == f"pippa: gpu fault {name} on {h.name}"
        assert post.fields["reason"].startswith("GPU 5: GPU fault: Xid 79 (fallen off the bus) at ")
        assert post.fields["reason"].endswith(f" during run {run_id}")
        # the fault is in the host's doctor history at once: the badge, `hosts` and --failover read it
        hist = pippa(env, repo, "doctor", h.name, "--history", "--json")
        newest = json.loads(hist.stdout)[0]["results"][0]
        assert (newest["verdict"], newest["source"]) == ("fail", "watcher"), hist.stdout
        hosts = {e["name"]: e for e in json.loads(pippa(env, repo, "hosts", "--json").stdout)}
        doctor = hosts[h.name]["doctor"]
        assert (doctor["verdict"], doctor["failed"]) == ("fail", ["xid"]), doctor

        seen = watch_state(h).get("sample_time", 0.0)  # several more polls: still one alert
        wait_until(lambda: watch_state(h).get("sample_time", 0.0) > seen + 4)
        assert sum(1 for p in hook.posts if p.fields.get("state") == "gpu fault") == 1
        assert not [p for p in hook.posts if p.fields.get("state") in ("idle", "busy")], "no idle_alert"

        again = pippa(env, repo, "up", h.name, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["alerts"]["watcher"] == pid, "one watcher per host user, kept"

        (repo / ".env").write_text("")  # alerts no longer configured: the next `up` stops the watcher
        off = pippa(env, repo, "up", h.name, "--json")
        assert off.returncode == 0, off.stderr
        alerts = json.loads(off.stdout)["alerts"]
        assert alerts == {"configured": False, "watcher": None, "watcher_error": None}
        wait_until(lambda: not Path(f"/proc/{pid}").exists())
        assert TOKEN not in up.stdout + again.stdout + off.stdout
    finally:
        pippa(env, repo, "stop", "xidrun", "--host", h.name)
        if (h.home / PROG).exists():
            h.run_as_user(["python3", "-S", "-I", str(h.home / PROG), "alerts", "watch-stop"])
        subprocess.run(["rm", "-rf", str(h.home / ".config" / "pippa" / "alerts")], check=False)
