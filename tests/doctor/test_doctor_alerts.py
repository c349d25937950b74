"""The host's alert watcher also watches the GPUs while a run is active: a new Xid line in the (fake)
kernel log produces exactly one alert, naming the GPU, the Xid and the run. Real parts: a loopback sshd
host set up by `pippa up`, the host program's watcher, a real tmux run, Apprise posting to a real HTTP
server on loopback (tests/ops/webhook.py)."""

from __future__ import annotations

import json
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


def test_a_new_xid_during_a_run_is_one_alert(client_env, ssh_hosts, hook, tmp_path) -> None:
    h = ssh_hosts[2]
    repo = make_project(tmp_path / "repo")
    (repo / ".gitignore").write_text(".env\n")
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    case = make_case("clean")
    fake = install_fakes(h, case)
    env_line = ", ".join(f"{k} = {json.dumps(v)}" for k, v in host_env(fake, case).items())
    inv = client_env.personal_inventory
    extra = f'setup = []\nsecrets = []\nidle_alert = "2s"\nenv = {{ {env_line} }}\n'
    inv.write_text(inv.read_text().replace(f"[hosts.{h.name}]\n", f"[hosts.{h.name}]\n{extra}"))
    env = client_env.env
    try:
        up = pippa(env, repo, "up", h.name, "--json")
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["alerts"]["watcher"]
        run = pippa(env, repo, "run", "--host", h.name, "--name", "xidrun", "--cmd", "sleep 120")
        assert run.returncode == 0, run.stderr
        run_id = next(line.split()[1] for line in run.stdout.splitlines() if line.startswith("started "))
        wait_until(lambda: watch_state(h).get("active_run") == run_id)

        with open(fake / "kmsg", "a") as f:  # the driver logs a GPU falling off the bus
            f.write(xid_line(BUS_IDS[5], 79, "GPU has fallen off the bus.") + "\n")
        post = hook.wait_for(lambda p: p.fields.get("state") == "gpu fault", timeout=60)
        assert post.json["title"] == f"pippa: gpu fault {run_id} on {h.name}"
        assert post.fields["reason"].startswith("GPU 5: Xid 79 (fallen off the bus) at ")
        assert post.fields["reason"].endswith(f" during run {run_id}")

        seen = watch_state(h).get("sample_time", 0.0)  # several more polls: still one alert
        wait_until(lambda: watch_state(h).get("sample_time", 0.0) > seen + 6)
        assert sum(1 for p in hook.posts if p.fields.get("state") == "gpu fault") == 1
    finally:
        pippa(env, repo, "stop", "xidrun", "--host", h.name)
        if (h.home / PROG).exists():
            h.run_as_user(["python3", "-S", "-I", str(h.home / PROG), "alerts", "watch-stop"])
        subprocess.run(["rm", "-rf", str(h.home / ".config" / "pippa" / "alerts")], check=False)
