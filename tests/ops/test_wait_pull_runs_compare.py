"""The daily loop over real OpenSSH hosts (tests/sshd.py) and one real tiny training run (W&B offline):
`pippa wait --notify`, `pippa pull` (incremental, a checkpoint on request, nothing partial after a
drop), `pippa runs`, `pippa compare` (config diff, terminal plot, PNG)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sshd
from conftest import PIPPA

from pippa_ops.errors import HostUnreachable

# The module's runs are set up once (``daily``): its tests share one xdist worker (--dist loadgroup).
pytestmark = [pytest.mark.ssh, pytest.mark.xdist_group("daily_loop")]
REPO = Path(__file__).resolve().parents[2]
NOTIFY_SEND = '#!/bin/sh\nprintf "%s\\n" "$@" >> {notes}\n'


def pippa(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def started(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr
    return next(line.split()[1] for line in p.stdout.splitlines() if line.startswith("started "))


@dataclass
class Daily:
    env: dict[str, str]
    host: sshd.SSHHost
    real: str  # a real `tiny` run: 4 steps, checkpoints at 2 and 4, evals, W&B offline
    fake: str  # a --cmd job that wrote a metrics file: tiny's header with seed and lr changed, 9 steps
    wait: subprocess.CompletedProcess[str]  # `pippa wait REAL --notify`
    notes: Path  # what the stand-in notify-send was given

    def host_run(self, run_id: str) -> Path:
        return self.host.home / "pippa" / "runs" / run_id


@pytest.fixture(scope="module")
def daily(ssh_world: sshd.World, tmp_path_factory: pytest.TempPathFactory) -> Daily:
    h = ssh_world.hosts[3]
    h.start()
    root = tmp_path_factory.mktemp("daily")
    home = root / "client"
    shutil.copytree(ssh_world.client_template, home)
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    with open(home / ".config" / "pippa" / "hosts.toml", "a") as f:
        f.write('env = { WANDB_MODE = "offline" }\n')  # the last table is this host's
    bin_dir, notes = root / "bin", root / "notes.txt"
    bin_dir.mkdir()
    (bin_dir / "notify-send").write_text(NOTIFY_SEND.format(notes=notes))
    (bin_dir / "notify-send").chmod(0o755)
    env = sshd.client_subprocess_env(home)
    env.update(PATH=f"{bin_dir}:{env['PATH']}", DISPLAY=":0")
    sets = ["--set", "train.max_steps=4", "--set", "checkpoint.every=2", "--set", "eval.interval=2"]
    real = started(pippa(env, "run", "tiny", "--host", h.name, "--name", "daily", *sets))
    wait = pippa(env, "wait", real, "--host", h.name, "--notify", timeout=280)
    cmd = f"python3 tests/ops/fake_run.py {real} 9"
    fake = started(pippa(env, "run", "--cmd", cmd, "--host", h.name, "--name", "fake"))
    done = pippa(env, "wait", fake, "--host", h.name, "--json", timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)[fake]["state"] == "finished", done.stderr
    return Daily(env, h, real, fake, wait, notes)


def test_wait_returns_when_the_run_ends_and_tells_the_user(daily: Daily) -> None:
    log = daily.host_run(daily.real) / "output.log"
    assert daily.wait.returncode == 0, daily.wait.stderr + (log.read_text()[-3000:] if log.exists() else "")
    line = f"{daily.host.name}: run {daily.real} (tiny) finished (exit 0) after "
    assert f"\apippa: {line}" in daily.wait.stderr  # the bell, then one line
    assert daily.notes.read_text().splitlines()[:3] == ["--app-name", "pippa", "pippa"]
    assert daily.notes.read_text().splitlines()[3].startswith(line)  # the desktop notification


def _host_files(run_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and not p.is_symlink() and "checkpoints" not in p.relative_to(run_dir).parts
    }


def _local_files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_pull_brings_the_record_then_only_what_grew_and_a_checkpoint_on_request(
    daily: Daily, tmp_path: Path
) -> None:
    runs_dir = tmp_path / "runs"  # this test's own copies: the first pull brings everything
    env, h, rd = daily.env, daily.host.name, str(runs_dir)
    p = pippa(env, "pull", daily.real, "--host", h, "--runs-dir", rd, "--json")
    assert p.returncode == 0, p.stderr
    (first,) = json.loads(p.stdout)
    local, remote = runs_dir / h / daily.real, daily.host_run(daily.real)
    assert Path(first["path"]) == local and first["checkpoint"] is None
    assert first["checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    assert {"run.json", "metrics.jsonl", "output.log", "exit_code", "cmd.sh"} <= set(first["new"])
    assert any(n.startswith("wandb/offline-run-") and n.endswith(".wandb") for n in first["new"])
    assert _local_files(local) == _host_files(remote)  # byte for byte; no checkpoint unless asked

    again = json.loads(pippa(env, "pull", daily.real, "--host", h, "--runs-dir", rd, "--json").stdout)[0]
    assert (again["new"], again["grown"], again["bytes"]) == ([], [], 0)

    daily.host.run_as_user(["sh", "-c", f"printf 'late line\\n' >> {remote}/output.log"]).check_returncode()
    grew = json.loads(pippa(env, "pull", daily.real, "--host", h, "--runs-dir", rd, "--json").stdout)[0]
    assert (grew["new"], grew["grown"], grew["bytes"]) == ([], ["output.log"], len("late line\n"))
    assert (local / "output.log").read_bytes() == (remote / "output.log").read_bytes()

    p = pippa(env, "pull", daily.real, "--host", h, "--runs-dir", rd, "--checkpoints")
    assert p.returncode == 0 and "checkpoint: checkpoint-4" in p.stdout, p.stderr
    ckpt = local / "checkpoints" / "checkpoint-4"
    assert _local_files(ckpt) == _local_files(remote / "checkpoints" / "checkpoint-4") != {}
    assert not (local / "checkpoints" / "checkpoint-2").exists()
    assert not list(runs_dir.rglob(".pippa-part-*"))


def test_a_pull_cut_off_by_a_dropped_connection_leaves_no_partial_file(ssh_hosts, ssh_env, tmp_path) -> None:
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.pull import pull_run

    h = ssh_hosts[1]
    run_id = "20260101-000000-big-0001"
    d = h.home / "pippa" / "runs" / run_id
    big = os.urandom(24 << 20)
    h.run_as_user(["mkdir", "-p", str(d)]).check_returncode()
    (d / "run.json").write_text(json.dumps({"run_id": run_id, "session": "big", "command": "true"}))
    (d / "big.bin").write_bytes(big)
    local = tmp_path / "runs" / h.name / run_id

    def drop_mid_stream(done: int, total: int) -> None:
        if 0 < done < total and h._proc is not None:
            h.drop()

    spec, transport = connect(h.name)
    try:
        with pytest.raises(HostUnreachable, match=f"{h.name}: connection dropped while pulling {run_id}"):
            pull_run(transport, spec, run_id, tmp_path / "runs", progress=drop_mid_stream)
    finally:
        transport.close()
        h.start()
    assert not (local / "big.bin").exists() and not list(tmp_path.rglob(".pippa-part-*"))
    spec, transport = connect(h.name)
    with transport:
        result = pull_run(transport, spec, run_id, tmp_path / "runs")
    assert sorted(result.new) == ["big.bin", "run.json"]
    assert result.received == len(big) + len((d / "run.json").read_bytes())
    assert hashlib.sha256((local / "big.bin").read_bytes()).digest() == hashlib.sha256(big).digest()


def _runs(env: dict[str, str], *args: str) -> dict[str, Any]:
    p = pippa(env, "runs", "--json", *args)
    assert p.returncode == 0, p.stderr
    return {r["run_id"]: r for r in json.loads(p.stdout)["runs"]}


def test_runs_lists_steps_rewards_evals_and_wandb_from_hosts_and_pulled_copies(
    daily: Daily, tmp_path: Path
) -> None:
    runs_dir = tmp_path / "runs"
    env, h, rd = daily.env, daily.host.name, str(runs_dir)
    assert pippa(env, "pull", daily.real, "--host", h, "--runs-dir", rd).returncode == 0
    listed = _runs(env, "--host", h, "--runs-dir", rd)
    real, fake = listed[daily.real], listed[daily.fake]
    assert (real["recipe"], real["state"], real["exit_code"], real["steps"]) == ("tiny", "finished", 0, 4)
    lines = (daily.host_run(daily.real) / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    rewards = [m["reward/mean"] for m in metrics if m["type"] == "step"]
    assert (real["final_reward"], real["best_reward"]) == (rewards[-1], max(rewards))
    assert real["eval"]["step"] == 4 and 0.0 <= real["eval"]["eval/accuracy"] <= 1.0
    assert real["wandb"]["mode"] == "offline" and real["wandb"]["id"]
    assert real["pulled"] == str(runs_dir / h / daily.real) and fake["pulled"] is None
    assert (fake["steps"], fake["best_reward"], fake["eval"]["eval/accuracy"]) == (9, 0.8, 0.5)

    # the host is shared with other modules' tests (another tiny run may be there): judge these two runs
    tiny = _runs(env, "--host", h, "--runs-dir", rd, "--recipe", "ti*")
    assert daily.real in tiny and daily.fake not in tiny and {r["recipe"] for r in tiny.values()} == {"tiny"}
    ranked = list(_runs(env, "--host", h, "--runs-dir", rd, "--sort", "best"))
    assert [r for r in ranked if r in (daily.fake, daily.real)] == [daily.fake, daily.real]
    assert _runs(env, "--host", h, "--runs-dir", rd, "--since", "2099-01-01") == {}
    daily.host.stop()  # the pulled copy is listed without its host
    try:
        pulled = _runs(env, "--pulled", "--runs-dir", rd)
    finally:
        daily.host.start()
    assert set(pulled) == {daily.real} and pulled[daily.real]["state"] == "finished"
    table = pippa(env, "runs", "--host", h, "--runs-dir", rd, "-v")  # whole ids
    assert table.returncode == 0 and "BEST" in table.stdout and daily.real in table.stdout


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_compare_shows_the_config_keys_that_differ_and_plots_the_curves(daily: Daily, tmp_path: Path) -> None:
    env, h = daily.env, daily.host.name
    png = tmp_path / "cmp.png"
    args = ["compare", daily.real, daily.fake, "--host", h, "-m", "reward/mean", "-m", "eval/accuracy"]
    p = pippa(env, *args, "--smooth", "0.6", "--png", str(png), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out["config_diff"]) == {"config.seed", "config.train.learning_rate"}
    assert out["config_diff"]["config.seed"] == {daily.real: 42, daily.fake: 7}
    assert [s for s, _ in out["metrics"]["reward/mean"][daily.real]] == [1, 2, 3, 4]
    assert [s for s, _ in out["metrics"]["reward/mean"][daily.fake]] == list(range(1, 10))
    raw, smoothed = out["metrics"]["reward/mean"][daily.fake], out["smoothed"]["reward/mean"][daily.fake]
    assert smoothed[0] == pytest.approx(raw[0])
    assert smoothed[2][1] > raw[2][1]  # the EMA fills the dip at step 3
    data = png.read_bytes()
    assert len(data) > 20_000 and _png_size(data) == (990, 704)  # two panels at 9 x 3.2 in, 110 dpi
    from PIL import Image

    with Image.open(png) as im:
        assert len(im.convert("RGB").getcolors(1 << 20) or []) > 50  # curves and text, not a blank page

    text = pippa(env, "compare", daily.real, daily.fake, "--host", h)
    assert text.returncode == 0, text.stderr
    assert "config (only the keys that differ):" in text.stdout
    assert "config.train.learning_rate" in text.stdout
    axis = text.stdout.splitlines()
    ticks = axis[next(i for i, line in enumerate(axis) if "└" in line) + 1].split()
    assert ticks and all(t.isdigit() for t in ticks)  # whole steps on the x axis

    rd = str(tmp_path / "runs")
    assert pippa(env, "pull", daily.real, daily.fake, "--host", h, "--runs-dir", rd).returncode == 0
    daily.host.stop()  # ended runs that were pulled compare without their host
    try:
        offline = pippa(env, "compare", daily.real, daily.fake, "--runs-dir", rd, "--json")
    finally:
        daily.host.start()
    assert offline.returncode == 0, offline.stderr
    assert [r["source"] for r in json.loads(offline.stdout)["runs"]] == ["pulled", "pulled"]
    assert json.loads(offline.stdout)["config_diff"] == out["config_diff"]


def test_wait_exits_with_the_run_status_times_out_and_rides_out_a_drop(ssh_hosts, ssh_env) -> None:
    from pippa_ops.hosts.inventory import resolve
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.reading.wait import wait_run

    env, h = ssh_env.env, ssh_hosts[2]
    flag = h.home / f"go-{os.getpid()}-{time.monotonic_ns()}"  # the slow run ends when the test says so
    failing = started(pippa(env, "run", "--cmd", "sleep 1; exit 3", "--host", h.name, "--name", "w-fail"))
    slow_cmd = f"while [ ! -e {flag} ]; do sleep 0.2; done; exit 4"
    slow = started(pippa(env, "run", "--cmd", slow_cmd, "--host", h.name, "--name", "w-slow"))
    p = pippa(env, "wait", failing, "--host", h.name)
    assert p.returncode == 3 and f"run {failing} (sleep 1; exit 3) failed (exit 3)" in p.stdout, p.stderr
    p = pippa(env, "wait", slow, "--host", h.name, "--timeout", "0.5")
    assert p.returncode == 124 and "had not ended" in p.stderr  # the slow run goes on: the timeout ended it

    notes: list[str] = []
    rec = locate([slow], h.name)[slow]
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(wait_run(resolve(h.name), rec, note=notes.append, backoff_s=(0.5,)))
    )
    try:
        waiter.start()
        time.sleep(1.0)  # (the drop comes while following or while connecting: both are ridden out)
        h.drop()  # the connection goes away mid-wait ...
        deadline = time.monotonic() + 30
        while not notes and time.monotonic() < deadline:
            time.sleep(0.05)
        h.start()  # ... and comes back
    finally:
        h.run_as_user(["touch", str(flag)])
    waiter.join(60)
    h.run_as_user(["rm", "-f", str(flag)])
    assert got and (got[0].state, got[0].exit_code) == ("failed", 4)
    assert notes and "reconnecting in 0.5s" in notes[0]


def test_pull_wandb_sync_runs_wandb_sync_on_the_host_with_its_key(daily: Daily, monkeypatch, tmp_path):
    """No network here: without a key on the host it says so; with one (and W&B's address pointing
    nowhere) the real `wandb sync` starts on the run's offline W&B run and is stopped at the timeout."""
    from pippa_ops.errors import RemoteCommandFailed
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.pull import wandb_sync

    env, h = daily.env, daily.host
    p = pippa(env, "pull", daily.real, "--host", h.name, "--runs-dir", str(tmp_path / "runs"), "--wandb-sync")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no WANDB_API_KEY on the host" in p.stderr
    secrets_file = h.home / ".config" / "pippa" / "secrets.env"
    h.run_as_user(["mkdir", "-p", str(secrets_file.parent)]).check_returncode()
    key = "local-" + "0" * 40
    text = f"WANDB_API_KEY='{key}'\nWANDB_BASE_URL='http://127.0.0.1:9'\n"
    h.run_as_user(["sh", "-c", f'umask 077; cat > "{secrets_file}"'], input=text).check_returncode()
    for name in ("HOME", "XDG_CONFIG_HOME", "PIPPA_INVENTORY"):
        monkeypatch.setenv(name, env[name])
    spec, transport = connect(h.name)
    try:
        with transport, pytest.raises(RemoteCommandFailed, match=r"sync of .* did not finish within 5s"):
            wandb_sync(transport, spec, daily.real, timeout_s=5)
    finally:
        secrets_file.unlink()


def test_run_notify_tells_when_the_run_ends_after_the_command_returned(ssh_hosts, client_env, tmp_path):
    bin_dir, notes = tmp_path / "bin", tmp_path / "notes.txt"
    bin_dir.mkdir()
    (bin_dir / "notify-send").write_text(NOTIFY_SEND.format(notes=notes))
    (bin_dir / "notify-send").chmod(0o755)
    env = {**client_env.env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DISPLAY": ":0"}
    h = ssh_hosts[2]
    t0 = time.monotonic()
    p = pippa(env, "run", "--cmd", "sleep 2; exit 2", "--host", h.name, "--name", "notified", "--notify")
    run_id = started(p)
    assert "notify:  when it ends (watcher pid" in p.stdout
    assert not notes.exists()  # the command returned while the run goes on
    while not notes.exists() and time.monotonic() - t0 < 60:
        time.sleep(0.3)
    told = notes.read_text().splitlines()[3]
    assert told.startswith(f"{h.name}: run {run_id} (sleep 2; exit 2) failed (exit 2)")
