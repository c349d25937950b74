"""`pippa up` end to end on loopback hosts (no network there: setup and uv come from the test)."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from argv_scan import watching_argv
from conftest import PIPPA
from projects import make_project

pytestmark = pytest.mark.ssh

SECRET = "sekrit-value-8c1f0e"
FAKE_UV = '#!/bin/sh\necho "uv 0.0.0-test"\n'
# What the fake installer does: uv lands in ~/.local/bin, which is not on a non-interactive PATH.
FAKE_CURL = (
    "#!/bin/sh\ncat <<'EOS'\nmkdir -p \"$HOME/.local/bin\"\n"
    'printf \'#!/bin/sh\\necho "uv 9.9.9-installed"\\n\' > "$HOME/.local/bin/uv"\n'
    'chmod +x "$HOME/.local/bin/uv"\nEOS\n'
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (r / ".gitignore").write_text(".env\n")
    (r / ".env").write_text(f'WANDB_API_KEY={SECRET}\nHF_TOKEN="it\'s a token"\nOTHER=not-pushed\n')
    make_project(r)
    return r


def _pippa(client_env, repo, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The ``pippa`` CLI as the user runs it: the test client's home, from the repo."""
    return subprocess.run(
        [PIPPA, *args], env=client_env.env, cwd=repo, capture_output=True, text=True, timeout=timeout
    )


def _configure(client_env, name: str, extra: str) -> None:
    inv = client_env.personal_inventory
    text = inv.read_text().replace(f"[hosts.{name}]\n", f"[hosts.{name}]\n{extra}")
    inv.write_text(text)


def test_up_prepares_host_pushes_secrets_0600_and_is_fast_the_second_time(client_env, ssh_hosts, repo):
    h = ssh_hosts[0]
    h.install_bin("uv", FAKE_UV)
    _configure(
        client_env,
        h.name,
        'setup = ["echo setting-up-now", "echo run >> ~/setup-count"]\n'
        'secrets = ["WANDB_API_KEY", "HF_TOKEN", "WANDB_ENTITY"]\n',
    )
    p, leaked = watching_argv(SECRET, lambda: _pippa(client_env, repo, "up", h.name, timeout=120))
    assert p.returncode == 0, p.stderr
    assert not leaked, "secret appeared in some process's argv"
    assert SECRET not in p.stdout + p.stderr
    assert "setting-up-now" in p.stderr, "setup output is streamed"
    assert "none (this host has no NVIDIA GPU)" in p.stdout
    assert "uv 0.0.0-test" in p.stdout and str(h.home / "pippa") in p.stdout
    secrets = h.home / ".config" / "pippa" / "secrets.env"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and secrets.stat().st_uid == h.uid
    sourced = h.run_as_user(
        ["sh", "-c", f'set -a; . {secrets}; printf \'%s|%s\' "$WANDB_API_KEY" "$HF_TOKEN"']
    )
    assert sourced.stdout == f"{SECRET}|it's a token"
    assert "OTHER" not in secrets.read_text()
    assert (h.home / "pippa" / "pyproject.toml").exists() and not (h.home / "pippa" / ".env").exists()

    again = _pippa(client_env, repo, "up", h.name, "--json")
    report = json.loads(again.stdout)
    assert (report["setup_ran"], report["synced_files"], report["gpus"]) == (False, 0, [])
    assert report["secrets_missing"] == ["WANDB_ENTITY"]
    assert (h.home / "setup-count").read_text() == "run\n", "setup not rerun when nothing changed"


def test_up_installs_uv_for_the_user_when_missing(client_env, ssh_hosts, repo):
    h = ssh_hosts[3]
    h.install_bin("curl", FAKE_CURL)
    _configure(client_env, h.name, 'setup = "uv --version"\nsecrets = []\n')
    p = _pippa(client_env, repo, "up", h.name)
    assert p.returncode == 0, p.stderr
    assert "uv 9.9.9-installed (installed now)" in p.stdout
    assert "uv 9.9.9-installed" in p.stderr, "setup found uv in ~/.local/bin"
    assert (h.home / ".local" / "bin" / "uv").exists()


def test_failing_setup_is_one_line_with_its_last_output(client_env, ssh_hosts, repo):
    h = ssh_hosts[2]
    h.install_bin("uv", FAKE_UV)
    _configure(client_env, h.name, 'setup = "echo resolving; echo no matching torch >&2; exit 3"\n')
    p = _pippa(client_env, repo, "up", h.name)
    assert p.returncode == 1
    assert (
        p.stderr.strip().splitlines()[-1] == "pippa: t3: setup failed with exit status 3: no matching torch"
    )
