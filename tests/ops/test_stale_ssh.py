"""A failover that never trains twice, between loopback OpenSSH hosts with the real trainer in real tmux:
the run's host drops off the network (its sshd and every connection killed, the trainer left going),
``pippa wait`` started after that moves the run from the laptop's pulled copy to the ``--failover``
host, and when the old host answers again the wait ends the copy there (no metrics row after), marks
it ``moved to`` the live host and alerts once; the run's short id then means the live copy."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import webhook
from conftest import PIPPA
from test_restart_ssh import REPO, pippa, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
TOKEN = "tok-st4le"
# A run that goes on for the whole test (each tiny step takes well under a second); a checkpoint every 10.
SETS = ["--set", "train.max_steps=100000", "--set", "checkpoint.every=10", "--set", "eval.interval=100000"]


@pytest.fixture
def hook() -> Iterator[webhook.Webhook]:
    with webhook.serve() as h:
        yield h


def _trainers_in(run_dir: Path) -> list[int]:
    """The trainer processes of the copy in ``run_dir`` (both hosts' copies share the run id)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(b"training_core.") for a in argv) and any(
            str(run_dir).encode() in a for a in argv
        ):
            out.append(int(pid))
    return out


def test_a_host_back_after_a_failover_has_its_copy_ended_marked_and_alerted_once(
    client_env, ssh_hosts, hook, tmp_path: Path
) -> None:
    a, b = ssh_hosts[2], ssh_hosts[3]
    env = {**client_env.env, "PIPPA_FAILOVER_AFTER_S": "3", "PIPPA_NOTIFY": hook.url(TOKEN)}
    assert pippa(env, "sync", b.name, timeout=300).returncode == 0
    run_id = started(
        pippa(env, "run", "tiny", "--host", a.name, "--name", "twice", "--failover", b.name, *SETS)
    )
    old_dir, new_dir = a.home / "pippa" / "runs" / run_id, b.home / "pippa" / "runs" / run_id
    log = old_dir / "output.log"
    wait_for(
        lambda: (old_dir / "checkpoints" / "checkpoint-10").is_dir(), 300, lambda: log.read_text()[-999:]
    )
    pulled = pippa(env, "pull", run_id, "--host", a.name, "--checkpoints", "--runs-dir", str(tmp_path))
    assert pulled.returncode == 0, pulled.stderr

    a.drop()  # the network is gone: sshd and its connections killed; the trainer trains on
    argv = [PIPPA, "wait", run_id, "--runs-dir", str(tmp_path), "--timeout", "400"]
    waiter = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: len(steps(new_dir)) >= 3, 300, lambda: f"no steps on {b.name} yet")  # it moved
        assert _trainers_in(old_dir), "the old host's copy should still be going while its host is away"
        going = len(steps(old_dir))
        wait_for(lambda: len(steps(old_dir)) > going, 60, "the stale copy should still train meanwhile")

        a.start()  # the host answers again, its copy still training
        wait_for(
            lambda: (old_dir / "moved_to").exists() and not _trainers_in(old_dir),
            60,
            f"{a.name}'s copy was not ended within a poll of its return",
        )
        assert (old_dir / "moved_to").read_text() == b.name + "\n"
        rows = len(steps(old_dir))
        live = len(steps(new_dir))
        time.sleep(3)
        assert len(steps(old_dir)) == rows  # no metrics row by the stale copy once it was ended
        wait_for(lambda: len(steps(new_dir)) > live, 60, lambda: (new_dir / "output.log").read_text()[-3000:])
        assert len(_trainers_in(new_dir)) == 1  # exactly one live copy, training on

        posts = [p for p in hook.posts if "stale copy" in p.body.decode()]
        assert len(posts) == 1 and b.name in posts[0].body.decode(), [p.body for p in hook.posts]
        ps = pippa(env, "ps", "--json")
        found = {
            h: [r for r in v.get("runs", []) if r["run_id"] == run_id]
            for h, v in json.loads(ps.stdout).items()
        }
        assert found[a.name][0]["state_text"] == f"moved to {b.name}", found
        assert found[b.name][0]["state"] == "running", found
        short = run_id.rsplit("-", 1)[1]
        why = pippa(env, "why", short, "--json")
        assert why.returncode == 0 and json.loads(why.stdout)["host"] == b.name, why.stdout + why.stderr
        assert (
            len([p for p in hook.posts if "stale copy" in p.body.decode()]) == 1
        )  # ps, why: no second alert
    finally:
        waiter.terminate()
        _out, err = waiter.communicate(timeout=30)
        pippa(env, "stop", run_id, "--host", b.name)
    said = [ln for ln in err.splitlines() if "failover" in ln]
    assert len(said) == 1 and "the copy in" in said[0] and f"to {b.name}" in said[0], err
