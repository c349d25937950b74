"""``pippa dash`` on the command line: bad input is one clear line and an exit code, no traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import PIPPA


def _env(tmp_path: Path) -> dict[str, str]:
    inventory = tmp_path / "team.toml"
    inventory.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"), PIPPA_INVENTORY=str(inventory))
    return env


def test_unknown_host_is_one_line_and_exit_3(tmp_path: Path) -> None:
    p = subprocess.run([PIPPA, "dash", "no-such-host"], env=_env(tmp_path), capture_output=True, text=True)
    assert p.returncode == 3, p.stderr
    assert p.stderr.startswith("pippa: ") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


def test_empty_inventory_says_what_to_do(tmp_path: Path) -> None:
    p = subprocess.run([PIPPA, "dash"], env=_env(tmp_path), capture_output=True, text=True)
    assert p.returncode == 2
    assert "pippa dash local" in p.stderr


def test_interval_below_one_second_is_refused(tmp_path: Path) -> None:
    argv = [PIPPA, "dash", "local", "--interval", "0"]
    p = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True)
    assert p.returncode == 2 and "--interval" in p.stderr and "Traceback" not in p.stderr
