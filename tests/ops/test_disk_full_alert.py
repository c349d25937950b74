"""A run that ended on a full disk sends one alert, its own (class disk-full, the path and the free
space in its reason), not a second ``disk low`` one; and it goes out though the alerts directory's
delivery log cannot be written on that disk. The host program itself on this machine, on a real tmpfs
filled to its last page, to a real webhook (the SSH path of the disk-full class: test_disk_full_ssh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import webhook
from hostprogram import install

TOKEN = "tok-d15kfu11"


@pytest.fixture
def hook() -> Iterator[webhook.Webhook]:
    with webhook.serve() as h:
        yield h


def _fill(mount: Path) -> None:
    for block in ("64k", "4k"):  # tmpfs counts whole pages: the last ones 4 KB at a time
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={mount / 'filler'}", f"bs={block}", "oflag=append", "conv=notrunc"],
            capture_output=True,
        )


def test_a_run_ended_by_a_full_disk_sends_exactly_one_alert(small_fs: Path, hook: webhook.Webhook) -> None:
    home = small_fs / "home"  # the alerts directory on the full disk too: its delivery log cannot grow
    alerts = home / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    prog = install(home)
    (alerts / "config.json").write_text(json.dumps({"host": "hx", "python": [sys.executable]}))
    (home / ".config" / "pippa" / "secrets.env").write_text(f"PIPPA_NOTIFY='{hook.url(TOKEN)}'\n")
    run_dir = small_fs / "runs" / "r-full"
    run_dir.mkdir(parents=True)
    reason = f"OSError: [Errno 28] No space left on device: '{run_dir}/metrics.jsonl' (0 B free on {run_dir})"
    (run_dir / "run.json").write_text(json.dumps({"host": "hx", "command": "true", "recipe": "tiny"}))
    attempt = {"attempt": 1, "outcome": "failed", "exit_code": 1, "class": "disk-full", "reason": reason}
    (run_dir / "attempts.json").write_text(json.dumps({"max_attempts": 1, "attempts": [attempt]}))
    (run_dir / "exit_code").write_text("1\n")
    _fill(small_fs)
    assert os.statvfs(small_fs).f_bavail == 0

    env = {**os.environ, "HOME": str(home)}
    argv = ["python3", "-S", "-I", str(prog), "alerts", "event", "--run-dir", str(run_dir)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["sent"] is True, (p.stdout, p.stderr)
    told = hook.wait_for(lambda x: x.fields.get("run") == "r-full")
    assert "disk-full" in told.json["message"] and "0 B free on" in told.json["message"], told.json
    # a run with no steps: what to free (the free space and the path its reason names) and the resume,
    # not the advice of a failed start ("fix the cause in its log; then pippa run tiny")
    look = [x for x in told.json["message"].splitlines() if x.startswith("look: ")]
    assert look == [
        f"look: free space on hx (0 B free on {run_dir}; it was writing {run_dir}/metrics.jsonl): ended runs "
        "(pippa prune --older-than 7d --host hx, pippa rm RUN), fewer checkpoints (checkpoint.keep); "
        "then pippa resume r-full --host hx"
    ], told.json["message"]
    time.sleep(1.0)  # a second message would come from the same process, before it exited: none did
    assert len(hook.posts) == 1, [x.json for x in hook.posts]
