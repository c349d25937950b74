"""The hostile suite (``hostile_suite.py``) is contained as root and as an ordinary user.

As root the sandbox runs each program under its own uid with cgroup caps; as a user it runs in a
user namespace with rlimit and tmpfs caps. The user run uses a throw-away Unix user (created and
removed here, as ``sshd.py`` does for SSH hosts) so the test never depends on who runs it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import hostile_suite
import pytest

REPO = Path(__file__).resolve().parents[2]


def test_every_hostile_program_is_contained_here() -> None:
    outcomes, launcher = hostile_suite.run_suite()
    escaped = [f"{o.area}/{o.name}: {o.evidence}" for o in outcomes if not o.contained]
    assert len(outcomes) >= 40
    assert escaped == [], hostile_suite.summary(outcomes, launcher)
    areas = {o.area for o in outcomes}
    assert {"kernel_keyring", "shared_state", "uncounted_memory", "kernel_interfaces"} <= areas
    assert len(outcomes) >= 70 and launcher.isolation.seccomp


def test_every_hostile_program_is_contained_as_an_ordinary_user(user_python: str) -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("needs root and useradd/runuser to create a throw-away user")
    user = f"pippa-h{uuid.uuid4().hex[:8]}"
    top = Path(tempfile.mkdtemp(prefix="pippa-hostile-"))  # outside pytest's 0700 tree
    os.chmod(top, 0o755)
    home = top / "home"
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-p", "*", user], check=True,
                   capture_output=True)
    try:
        home.mkdir()
        pw = pwd.getpwnam(user)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        r = subprocess.run(
            ["runuser", "-u", user, "--", "env", "-i", f"HOME={home}", f"PYTHONPATH={REPO}",
             "PATH=/usr/bin:/bin", user_python, str(Path(hostile_suite.__file__).resolve()), "--json"],
            capture_output=True, text=True, timeout=240, cwd=home)
    finally:
        subprocess.run(["userdel", "-f", user], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)
    assert r.stdout.strip(), r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    escaped = [o for o in report["outcomes"] if not o["contained"]]
    assert report["mode"] == "bwrap-user" and len(report["outcomes"]) >= 40
    assert escaped == [], report["summary"]
    assert len(report["outcomes"]) >= 70 and "seccomp on" in report["summary"]
