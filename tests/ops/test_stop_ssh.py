"""The meter that stops itself, end to end on a loopback OpenSSH host: the host entry's ``stop`` command,
run by the host's watcher when ``stop_when`` says so, told before and after through PIPPA_NOTIFY (a real
HTTP server on loopback): once after the last run's final checkpoint is whole on disk (never during a
save that takes 10 s), called off by ``pippa keep HOST``, and for ``idle:`` once after the period and
never while a run goes on."""

from __future__ import annotations

import json
import time

import pytest
import test_alerts
from test_alerts import FAKE_SMI, TOKEN, configure, pippa, started

pytestmark = pytest.mark.ssh
repo, hook, restore_host = test_alerts.repo, test_alerts.hook, test_alerts.restore_host  # their fixtures
STOP = 'stop = "date +%s.%N >> $HOME/stopped; echo the box is stopping"\n'
# A run whose final checkpoint is still being written for 10 s after it ended (a slow save finishing in
# the background), then renamed into place whole, as the trainer publishes a checkpoint.
SLOW_SAVE = (
    'd="$PIPPA_RUN_DIR/checkpoints"; mkdir -p "$d/.staging"; '
    'setsid sh -c \'for i in 1 2 3 4 5 6 7 8 9 10; do echo x >> "$0/.staging/shard"; sleep 1; done; '
    'mv "$0/.staging" "$0/checkpoint-1"\' "$d" >/dev/null 2>&1 </dev/null & echo saving'
)


def _wait(pred: object, timeout: float, why: object) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, why() if callable(why) else why
        time.sleep(0.2)


def _states(hook: object) -> list[str]:
    return [p.fields.get("state", "") for p in list(hook.posts)]  # type: ignore[attr-defined]


def _stops(h: object) -> list[float]:
    f = h.home / "stopped"  # type: ignore[attr-defined]
    return [float(x) for x in f.read_text().split()] if f.exists() else []


def test_done_runs_the_stop_once_after_the_final_checkpoint_and_keep_calls_it_off(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(client_env, h.name, f'secrets = []\n{STOP}stop_when = ["done"]\nstop_notice = "3s"\n')
    (h.home / "stopped").unlink(missing_ok=True)
    up = pippa(env, repo, "up", h.name)
    assert up.returncode == 0, up.stderr
    hosts = pippa(env, repo, "hosts")
    line = next((ln for ln in hosts.stdout.splitlines() if ln.startswith(f"{h.name}: ")), hosts.stdout)
    assert "stop on done" in line, hosts.stdout

    run_id = started(pippa(env, repo, "run", "--host", h.name, "--name", "st1", "--cmd", SLOW_SAVE).stdout)
    ck = h.home / "pippa" / "runs" / run_id / "checkpoints" / "checkpoint-1"
    _wait(lambda: "stop armed" in _states(hook), 60, lambda: _states(hook))
    armed = next(p for p in hook.posts if p.fields.get("state") == "stop armed")
    assert f"pippa keep {h.name}" in armed.fields["look"]
    _wait(lambda: _stops(h), 120, "the stop command never ran")
    assert ck.is_dir() and _stops(h)[0] >= ck.stat().st_ctime  # after the save was whole on disk
    ran = hook.wait_for(lambda p: p.fields.get("state") == "stop ran")
    assert "exit 0" in ran.fields["reason"] and "the box is stopping" in ran.fields["reason"]
    time.sleep(8)
    assert len(_stops(h)) == 1  # once: the trigger does not fire again

    started(pippa(env, repo, "run", "--host", h.name, "--name", "st2", "--cmd", "echo two").stdout)
    _wait(lambda: _states(hook).count("stop armed") == 2, 60, lambda: _states(hook))
    keep = pippa(env, repo, "keep", h.name)
    assert keep.returncode == 0 and "called off" in keep.stdout, keep.stdout + keep.stderr
    _wait(lambda: "stop cancelled" in _states(hook), 30, lambda: _states(hook))
    time.sleep(6)
    assert len(_stops(h)) == 1  # the cancel held
    again = pippa(env, repo, "keep", h.name)
    assert again.returncode == 0 and "no stop is armed" in again.stdout


def test_idle_runs_the_stop_once_after_the_period_and_never_while_a_run_goes_on(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    h.install_bin("nvidia-smi", FAKE_SMI)
    (h.home / "gpu-util").write_text("0\n")  # the GPUs idle from the start
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(client_env, h.name, f'secrets = []\n{STOP}stop_when = ["idle:4s"]\nstop_notice = "0s"\n')
    (h.home / "stopped").unlink(missing_ok=True)
    run_id = started(pippa(env, repo, "run", "--host", h.name, "--name", "id1", "--cmd", "sleep 12").stdout)
    up = pippa(env, repo, "up", h.name)  # the watcher starts while the run goes on
    assert up.returncode == 0, up.stderr
    run_dir = h.home / "pippa" / "runs" / run_id
    _wait(lambda: (run_dir / "exit_code").exists(), 60, "the run did not end")
    ended = (run_dir / "exit_code").stat().st_mtime
    assert _stops(h) == []  # idle GPUs, but a run was going
    _wait(lambda: _stops(h), 60, lambda: _states(hook))
    assert _stops(h)[0] >= ended + 4 - 1  # the idle period counts from the run's end
    time.sleep(8)
    assert len(_stops(h)) == 1  # one idle period, one stop
    status = json.loads(
        h.run_as_user(["python3", "-S", "-I", str(h.home / test_alerts.PROG), "alerts", "status"]).stdout
    )
    assert status["stop"]["last"]["trigger"] == "idle" and status["stop"]["armed"] is None
