"""``pippa resume RUN --on HOST`` with the real trainer between two loopback OpenSSH hosts in real tmux:
the run stopped on one host continues on the other in the same run id, one row per step, and ends where
an uninterrupted run of the same seed ends; from the laptop's pulled copy when the old host's sshd is
down; and the bad inputs (unknown host, a run still running, a copy that breaks off) change nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_restart_ssh import SETS, STEPS, pippa, records, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def _ended(run_dir: Path, timeout: float = 300) -> None:
    log = run_dir / "output.log"
    wait_for(
        lambda: (run_dir / "exit_code").exists(),
        timeout,
        lambda: log.read_text()[-3000:] if log.exists() else "",
    )


def _last_step(run_dir: Path) -> dict[str, Any]:
    row = [r for r in records(run_dir) if r.get("type") == "step"][-1]
    return {k: v for k, v in row.items() if not k.startswith("perf/") and k != "time"}


def _paused_at_step_4(client_env: Any, host: Any) -> None:
    """Runs on ``host`` wait at the end of step 4 until their stop (training_core.run.testhooks): the
    stop lands mid-run however fast the steps (the whole tiny run takes under a second on an idle
    machine; a stop during its last step completes it, with nothing left to move)."""
    inv = client_env.personal_inventory
    head = f"[hosts.{host.name}]\n"
    inv.write_text(inv.read_text().replace(head, f'{head}env = {{ PIPPA_TEST_PAUSE_AT_STEP = "4" }}\n'))


def _stop_after_a_checkpoint(env: dict[str, str], host: str, name: str, run_dir: Path) -> None:
    ck = run_dir / "checkpoints" / "checkpoint-2"
    wait_for(
        lambda: ck.is_dir() and max(steps(run_dir), default=0) >= 3,
        300,
        lambda: (run_dir / "output.log").read_text()[-2000:],
    )
    p = pippa(env, "stop", name, "--host", host)
    assert p.returncode == 0, p.stderr
    _ended(run_dir, 120)


def _ps(env: dict[str, str], host: str, run_id: str) -> dict[str, Any]:
    p = pippa(env, "ps", "--host", host, "--json")
    return next(r for r in json.loads(p.stdout)[host]["runs"] if r["run_id"] == run_id)


def test_a_stopped_run_moves_to_another_host_and_ends_where_an_uninterrupted_run_ends(
    client_env, ssh_hosts
) -> None:
    env, a, b = client_env.env, ssh_hosts[2], ssh_hosts[3]
    whole = started(pippa(env, "run", "tiny", "--host", b.name, "--name", "mwhole", *SETS))
    _ended(b.home / "pippa" / "runs" / whole)
    _paused_at_step_4(client_env, a)
    run_id = started(pippa(env, "run", "tiny", "--host", a.name, "--name", "mmove", *SETS))
    old_dir, new_dir = a.home / "pippa" / "runs" / run_id, b.home / "pippa" / "runs" / run_id

    bad = pippa(env, "resume", run_id, "--on", "no-such-host")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "no-such-host" in bad.stderr
    running = pippa(env, "resume", run_id, "--on", b.name)
    assert (
        running.returncode != 0
        and "still" in running.stderr
        and len(running.stderr.strip().splitlines()) == 1
    )
    assert not new_dir.exists()

    _stop_after_a_checkpoint(env, a.name, "mmove", old_dir)
    p = pippa(env, "resume", run_id, "--on", b.name)
    assert p.returncode == 0, p.stderr
    assert "checksummed" in p.stdout
    _ended(new_dir)
    assert (new_dir / "exit_code").read_text() == "0\n", (new_dir / "output.log").read_text()[-3000:]
    assert steps(new_dir) == list(range(1, STEPS + 1))  # one row per step, the moved ones included
    assert _last_step(new_dir) == _last_step(b.home / "pippa" / "runs" / whole)
    assert _ps(env, a.name, run_id)["state_text"] == f"moved to {b.name}"
    assert json.loads((new_dir / "run.json").read_text())["host"] == b.name
    assert not [p for p in (b.home / "pippa" / "runs").iterdir() if p.name.startswith(".pippa-move")]

    # a moved run moves once: from its stale copy, refused naming where it lives; to a host that has it,
    # refused; one line each, warm and direct
    third = ssh_hosts[1]
    for how in (env, {**env, "PIPPA_NO_REUSE": "1"}):
        again = pippa(how, "resume", run_id, "--host", a.name, "--on", third.name)
        assert (again.returncode, again.stdout) == (8, ""), again.stderr
        assert again.stderr == (
            f"pippa: {a.name}: run {run_id} moved to {b.name} and lives there "
            f"(pippa resume {run_id} --host {b.name}); not moved\n"
        )
        assert not (third.home / "pippa" / "runs" / run_id).exists()
        back = pippa(how, "resume", run_id, "--host", b.name, "--on", a.name)
        assert (back.returncode, back.stdout) == (8, ""), back.stderr
        refused = f"pippa: {a.name} already has run {run_id}: not moved (pippa ps --host {a.name})\n"
        assert back.stderr == refused, back.stderr


def test_a_run_moves_from_the_pulled_copy_when_its_host_is_down(
    client_env, ssh_hosts, tmp_path: Path
) -> None:
    env, a, b = client_env.env, ssh_hosts[2], ssh_hosts[3]
    _paused_at_step_4(client_env, a)
    run_id = started(pippa(env, "run", "tiny", "--host", a.name, "--name", "mcopy", *SETS))
    old_dir, new_dir = a.home / "pippa" / "runs" / run_id, b.home / "pippa" / "runs" / run_id
    _stop_after_a_checkpoint(env, a.name, "mcopy", old_dir)
    pulled = pippa(env, "pull", run_id, "--host", a.name, "--checkpoints", "--runs-dir", str(tmp_path))
    assert pulled.returncode == 0, pulled.stderr
    a.stop()
    try:
        p = pippa(env, "resume", run_id, "--on", b.name, "--runs-dir", str(tmp_path))
        assert p.returncode == 0, p.stderr
        assert "the copy in" in p.stdout
        _ended(new_dir)
        assert (new_dir / "exit_code").read_text() == "0\n", (new_dir / "output.log").read_text()[-3000:]
        assert steps(new_dir) == list(range(1, STEPS + 1))
    finally:
        a.start()
    shutil.rmtree(new_dir, ignore_errors=True)


def test_a_copy_that_breaks_off_leaves_nothing_on_the_new_host(ssh_env, ssh_hosts) -> None:
    from pippa_ops.errors import HostUnreachable
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.move import _receive_into

    b = ssh_hosts[3]
    run_json = json.dumps({"run_id": "20261126-000000-tiny-dead", "recipe": "tiny"}).encode() + b"\n"
    files = [["run.json", len(run_json), 0.0], ["metrics.jsonl", 1000, 0.0]]

    def chunks(rel: str) -> Any:
        yield run_json if rel == "run.json" else b"{" * 10  # then the source goes away

    spec, transport = connect(b.name)
    with transport, pytest.raises(HostUnreachable, match="broke off"):
        _receive_into(transport, spec, "20261126-000000-tiny-dead", files, {}, chunks)
    runs = b.home / "pippa" / "runs"
    assert not (runs / "20261126-000000-tiny-dead").exists()
    assert not [p for p in runs.iterdir() if p.name.startswith(".pippa-move")] if runs.exists() else True
