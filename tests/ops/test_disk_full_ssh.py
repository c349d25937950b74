"""A full disk is a class, not a death (issue 44): a real tiny run on a loopback OpenSSH host whose
``runs/`` is a small tmpfs of its own, held at step 4 while the test fills that tmpfs, then let go.
The trainer's metrics write meets ENOSPC: the attempt ends ``disk-full`` with the path and the free
space in its reason, the supervisor survives to record it (its reserve), the run has an exit code,
no metrics line is half-written, ``why`` says what to free; once space is back, ``pippa resume``
completes it with one row per step."""

from __future__ import annotations

import json
import pwd
import subprocess
from pathlib import Path

import pytest
from conftest import PIPPA
from test_restart_ssh import REPO, STEPS, pippa, records, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
SETS = ["--set", f"train.max_steps={STEPS}", "--set", "checkpoint.every=2", "--set", "eval.interval=1000"]


def _fill(mount: Path) -> Path:
    """The tmpfs filled to its last byte (root is bound by a tmpfs's size too)."""
    filler = mount / "filler"
    for block in ("64k", "4k"):  # tmpfs counts whole pages: the last ones 4 KB at a time
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={filler}", f"bs={block}", "oflag=append", "conv=notrunc"],
            capture_output=True,
        )
    return filler


@pytest.fixture
def full_host(client_env, ssh_hosts):  # type: ignore[no-untyped-def]
    """An inventory entry for ssh_hosts[3] whose remote_dir's runs/ is a 64 MB tmpfs; unmounted after."""
    h = ssh_hosts[3]
    user = pwd.getpwnam(h.user)
    base = h.home / "pippa-full"
    mount = base / "runs"
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(base)], check=True)
    subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size=64m,uid={user.pw_uid},gid={user.pw_gid},mode=0755",
            "tmpfs",
            str(mount),
        ],
        check=True,
    )
    inv = client_env.personal_inventory
    block = next(b for b in inv.read_text().split("\n\n") if b.startswith(f"[hosts.{h.name}]"))
    name = f"{h.name}full"
    once = h.home / "paused-disk-full"
    extra = (
        f'remote_dir = "~/pippa-full"\n'
        f'env = {{ PIPPA_TEST_PAUSE_AT_STEP = "4", PIPPA_TEST_PAUSE_ONCE = "{once}" }}\n'
    )
    entry = block.replace(f"[hosts.{h.name}]", f"[hosts.{name}]")
    inv.write_text(inv.read_text() + "\n" + entry + "\n" + extra)
    try:
        yield name, mount, once
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_ends_the_attempt_disk_full_and_resume_completes_after(client_env, full_host) -> None:
    env = client_env.env
    host, mount, once = full_host

    def log() -> str:
        return (run_dir / "output.log").read_text()[-3000:]

    run_id = started(pippa(env, "run", "tiny", "--host", host, "--name", "full", *SETS, timeout=300))
    run_dir = mount / run_id
    wait_for(lambda: once.exists() and (run_dir / "checkpoints" / "checkpoint-2").is_dir(), 300, log)
    filler = _fill(mount)
    once.unlink()  # let it go on: its next metrics line meets the full disk
    wait_for(lambda: (run_dir / "exit_code").exists(), 120, log)
    assert (run_dir / "exit_code").read_text() == "1\n"
    (attempt,) = json.loads((run_dir / "attempts.json").read_text())["attempts"]
    assert attempt["class"] == "disk-full", attempt
    assert " free on " in attempt["reason"] and str(mount) in attempt["reason"], attempt["reason"]
    assert attempt["decision"]["retry"] is False
    lines = (run_dir / "metrics.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1])  # no half-written line
    done = steps(run_dir)  # step 4's row may fit the file's last page; its checkpoint did not fit
    assert done == list(range(1, len(done) + 1)) and len(done) >= 3
    why = pippa(env, "why", run_id, "--host", host)
    assert why.returncode == 0, why.stderr
    assert "attempt 1/1  disk-full (" in why.stdout, why.stdout
    assert f"next: free space on {host} (" in why.stdout, why.stdout
    assert why.stdout.rstrip().endswith(f"then pippa resume {run_id} --host {host}"), why.stdout
    ps = pippa(env, "ps", "--host", host)
    assert "disk-full" in ps.stdout, ps.stdout

    filler.unlink()
    once.write_text("released")  # the resumed attempt runs through step 4
    r = pippa(env, "resume", run_id, "--host", host)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: (run_dir / "exit_code").exists(), 300, log)
    assert (run_dir / "exit_code").read_text() == "0\n", log()
    assert steps(run_dir) == list(range(1, STEPS + 1))  # one row per step: none lost, none doubled
    assert [x["resumed_from_step"] for x in records(run_dir) if x.get("type") == "header"] == [None, 2]


def test_pippa_run_reports_the_run_it_started_when_the_disk_fills_as_it_waits(client_env, full_host) -> None:
    host, mount, once = full_host
    once.write_text("no pause")  # the run goes straight on
    argv = [PIPPA, "run", "tiny", "--host", host, "--name", "fillwait", *SETS]
    pipe = subprocess.PIPE
    p = subprocess.Popen(argv, cwd=REPO, env=client_env.env, stdout=pipe, stderr=pipe, text=True)
    wait_for(lambda: any(mount.glob("*/output.log")), 120)
    _fill(mount)  # while `pippa run` waits for the run's first line
    out, err = p.communicate(timeout=300)
    (run_dir,) = [d for d in mount.iterdir() if d.is_dir()]
    assert out.startswith(f"started {run_dir.name}\n"), (out, err)
    assert "lost the SSH connection" not in err and "Traceback" not in err, err
    wait_for(lambda: (run_dir / "exit_code").exists(), 120)  # it ended with an exit code: not lost
