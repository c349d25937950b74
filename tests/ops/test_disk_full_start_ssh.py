"""A run asked to start on a disk already full is refused in one line, before anything is written (the
supervisor's reserve would not fit: pippa_contract.diskspace); nothing is left in runs/. A real loopback
OpenSSH host whose runs/ is a small tmpfs of its own, filled to its last page."""

from __future__ import annotations

import pytest
from test_disk_full_ssh import _fill, full_host  # noqa: F401 (the fixture: runs/ on a 64 MB tmpfs)
from test_restart_ssh import pippa

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def test_a_start_on_a_full_disk_is_refused_in_one_line_and_leaves_nothing(client_env, full_host) -> None:  # noqa: F811
    host, mount, once = full_host
    once.write_text("no pause")
    filler = _fill(mount)
    p = pippa(client_env.env, "run", "--host", host, "--name", "nofit", "--cmd", "true", timeout=300)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"pippa: {host}: not started: the disk of "), (
        p.stderr
    )
    assert " free on " in p.stderr and "Traceback" not in p.stderr
    assert sorted(x.name for x in mount.iterdir()) == ["filler"]  # no run directory left

    filler.unlink()  # space back: the same start goes
    ok = pippa(client_env.env, "run", "--host", host, "--name", "nofit", "--cmd", "true", timeout=300)
    assert ok.returncode == 0, ok.stderr
