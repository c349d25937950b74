"""A fleet of 32 loopback hosts (one sshd and one Unix user each, 8 fake GPUs each), through the
connection keeper: every host's row is present and right in ``pippa ps``, ``pippa hosts`` and the
dashboard's fleet view (a real terminal through tmux); typing part of a name and Enter opens that
host; a host that goes away mid-session reads unreachable, and comes back by itself."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sshd
from conftest import PIPPA, ClientEnv

from pippa_ops.dash.fleet import run_name
from pippa_ops.hosts.connect import open_transport
from pippa_ops.hosts.inventory import resolve
from pippa_ops.runs.launching.launch import launch

sys.path.insert(0, str(Path(__file__).parents[1] / "dash"))
import fake_smi

pytestmark = pytest.mark.ssh
N = 32
WITH_RUNS = (2, 17, 31)  # hosts t2, t17, t31 get a run each


@pytest.fixture(scope="module")
def fleet() -> Iterator[sshd.World]:
    reason = sshd.why_unavailable()
    if reason:
        pytest.skip(reason)
    world = sshd.start_world(N)
    try:
        for h in world.hosts:
            h.install_bin("nvidia-smi", fake_smi.script(gpus=8, python=h.python))
        yield world
    finally:
        world.close()


@pytest.fixture
def env(fleet: sshd.World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The fleet's client, with the connection keeper on (a private runtime dir)."""
    home = tmp_path / "client-home"
    shutil.copytree(fleet.client_template, home)
    client = ClientEnv(home)
    client.apply(monkeypatch)
    run_dir = Path(tempfile.mkdtemp(prefix="pf"))
    e = {**client.env, "PIPPA_RUNTIME_DIR": str(run_dir), "PIPPA_PERSIST_S": "120"}
    e.pop("PIPPA_NO_REUSE", None)
    e.pop("TMUX", None)
    try:
        yield e
    finally:
        subprocess.run([PIPPA, "hosts", "--disconnect"], env=e, capture_output=True, timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)


def _pippa(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], env=env, capture_output=True, text=True, timeout=180)


class Term:
    def __init__(self, env: dict[str, str]) -> None:
        self.socket = "pippa-fleet-" + secrets.token_hex(3)
        self.env = env

    def tmux(self, *args: str) -> str:
        argv = ["tmux", "-L", self.socket, *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "dash")

    def wait_for(self, check, what: str, timeout: float = 60) -> str:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not on screen after {timeout}s:\n{screen}")
            time.sleep(0.3)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True)


def _threads(env: dict[str, str], what: str) -> int:
    """The thread count of this client's keeper (``what`` "keeper": its socket is under the client's
    runtime dir) or of its ``pippa dash`` (``what`` "dash": started with the client's environment)."""
    mine = env["PIPPA_RUNTIME_DIR"].encode()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if what == "keeper":
                found = b"pippa_ops.transport.keeper" in cmdline and mine in cmdline
            else:
                found = cmdline.endswith(b"pippa\0dash\0") and mine in (proc / "environ").read_bytes()
            if found:
                status = (proc / "status").read_text()
                return int(next(x for x in status.splitlines() if x.startswith("Threads:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
    raise AssertionError(f"no {what} is running for this client")


def _row(screen: str, name: str) -> str:
    return next((ln for ln in screen.splitlines() if ln.startswith(f"{name} ")), "")


def test_32_hosts_in_ps_hosts_and_the_fleet_view(fleet, env) -> None:
    hosts = {h.name: h for h in fleet.hosts}
    run_ids = {}
    for i in WITH_RUNS:
        spec = resolve(f"t{i}")
        with open_transport(spec) as t:
            started = launch(spec, t, command="sleep 600", session=f"fleet{i}", sync=False)
        run_ids[f"t{i}"] = started.run_ids[0]

    for attempt in ("cold", "warm"):
        r = _pippa(env, "ps", "--json")
        assert r.returncode == 0, (attempt, r.stderr)
        out = json.loads(r.stdout)
        for name in hosts:
            assert name in out and "runs" in out[name], (attempt, name, out.get(name))
            ids = [x["run_id"] for x in out[name]["runs"]]
            assert ids == ([run_ids[name]] if name in run_ids else []), (attempt, name, ids)

    r = _pippa(env, "hosts", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    for name, h in hosts.items():
        assert rows[name]["reachable"] is True, rows[name]
        assert rows[name]["address"] == h.address and rows[name]["port"] == h.port

    term = Term(env)
    term.tmux("new-session", "-d", "-s", "dash", "-x", "160", "-y", "48", PIPPA, "dash")
    try:
        # Every host up with its 8 GPUs counted (busy/idle), the runs on their hosts.
        def all_up(screen: str) -> bool:
            return f"{N}/{N} hosts, {N} up" in screen and all("8/0" in _row(screen, n) for n in hosts)

        screen = term.wait_for(all_up, "every host up with 8 GPUs")
        for name in hosts:
            row = _row(screen, name)
            assert " up " in row, row
            names = [run_name(rid) for rid in run_ids.values()]
            assert (name in run_ids) == any(n in row for n in names), row
            if name in run_ids:
                assert run_name(run_ids[name]) in row, row

        # Every host's connection, GPU stream and agents are on the keeper's one event loop: its
        # threads do not grow with hosts (a keeper with a reader thread per connection ran 34 here).
        threads = _threads(env, "keeper")
        assert threads <= 16, f"the keeper runs {threads} threads for {N} hosts"
        # The dashboard's too: every host's GPU feed and run poll are tasks on Textual's loop, their
        # blocking calls in one bounded executor (it ran two threads per host before).
        threads = _threads(env, "dash")
        assert threads <= 16, f"the dashboard runs {threads} threads for {N} hosts"

        # A host goes away mid-session: unreachable within one refresh (the GPU stream's stall,
        # 10 s at the full rate), then back by itself once it listens again.
        gone = hosts["t9"]
        gone.drop()
        term.wait_for(lambda s: " down " in _row(s, "t9"), "t9 down", timeout=30)
        gone.start()
        term.wait_for(lambda s: " up " in _row(s, "t9"), "t9 up again", timeout=60)

        # Type part of a name, Enter: that host's panel.
        term.tmux("send-keys", "-t", "dash", "/", "t17")
        screen = term.wait_for(lambda s: "1/32 hosts" in s, "the filtered fleet")
        assert _row(screen, "t17") and not _row(screen, "t2")
        term.tmux("send-keys", "-t", "dash", "Enter")
        screen = term.wait_for(lambda s: "╭─ t17 " in s and run_ids["t17"][:20] in s, "t17 panel")
        assert "t17" in screen and run_ids["t17"][:20] in screen
        term.tmux("send-keys", "-t", "dash", "q")
    finally:
        term.close()
