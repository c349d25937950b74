"""`recover_on_boot = true`: `pippa up` installs one @reboot line in the host user's crontab, keeps it on
the next `up`, removes it when the setting goes, keeps the user's own lines, and says so where the host
has no crontab. The test makes each state itself (whether or not this machine has cron): first a
`crontab` that is not found, then a stand-in that keeps the table in a file, as `crontab -l` /
`crontab -` do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PIPPA
from projects import make_project

pytestmark = pytest.mark.ssh
# `crontab -l`: the table (exit 1 and a line when there is none); `crontab -`: replace it from stdin.
FAKE_CRONTAB = """#!/bin/sh
t="$HOME/.crontab-table"
case "$1" in
  -l) [ -f "$t" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }; cat "$t" ;;
  -) cat > "$t" ;;
  *) exit 2 ;;
esac
"""

# A host without cron: `crontab` is not found, as the shell says when no such command is on the PATH.
NO_CRONTAB = """#!/bin/sh
echo "sh: 1: crontab: not found" >&2
exit 127
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    make_project(r)
    return r


def up(client_env, repo: Path, host: str) -> dict[str, object]:
    p = subprocess.run(
        [PIPPA, "up", host, "--json"],
        env=client_env.env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def configure(client_env, name: str, extra: str) -> None:
    inv = client_env.personal_inventory
    text = inv.read_text()
    head = f"[hosts.{name}]\n"
    start = text.index(head) + len(head)
    rest = text[start:]
    rest = "".join(ln for ln in rest.splitlines(keepends=True) if not ln.startswith("recover_on_boot"))
    inv.write_text(text[:start] + extra + rest)


def test_up_installs_keeps_and_removes_the_reboot_line_and_leaves_other_lines(client_env, ssh_hosts, repo):
    h = ssh_hosts[1]
    configure(client_env, h.name, "setup = []\nsecrets = []\nrecover_on_boot = true\n")
    h.install_bin("crontab", NO_CRONTAB)  # a host without cron, even where this machine has one
    try:
        assert up(client_env, repo, h.name)["recover_on_boot"] == "unavailable"  # no crontab on the host
        env = client_env.env
        p = subprocess.run(
            [PIPPA, "up", h.name], env=env, cwd=repo, capture_output=True, text=True, timeout=120
        )
        assert f"recovery at boot is not available on {h.name}: no crontab" in p.stdout + p.stderr

        h.install_bin("crontab", FAKE_CRONTAB)
        table = h.home / ".crontab-table"
        h.run_as_user(["sh", "-c", "echo '0 3 * * * echo mine' | crontab -"]).check_returncode()
        assert up(client_env, repo, h.name)["recover_on_boot"] == "installed"
        lines = table.read_text().splitlines()
        assert lines[0] == "0 3 * * * echo mine" and len(lines) == 2
        assert lines[1] == (
            "@reboot python3 -S -I ~/.local/share/pippa/agent.pyz recover '~/pippa' "
            "# pippa recover_on_boot '~/pippa'"
        )
        assert (h.home / ".local" / "share" / "pippa" / "agent.pyz").is_file()
        assert up(client_env, repo, h.name)["recover_on_boot"] == "kept"
        assert table.read_text().splitlines() == lines  # one line, not two

        configure(client_env, h.name, "recover_on_boot = false\n")
        assert up(client_env, repo, h.name)["recover_on_boot"] == "removed"
        assert table.read_text() == "0 3 * * * echo mine\n"
    finally:
        h.run_as_user(
            [
                "rm",
                "-f",
                str(h.home / ".crontab-table"),
                str(h.home / ".local/share/pippa/agent.pyz"),
                str(h.home / "bin" / "crontab"),
            ]
        )
