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
    assert f"{h.name}: verdict ok (0 failed, 0 warning(s); passive checks only (--quick))" in p.stdout
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
    assert report["doctor"]["verdict"] == "ok" and report["doctor"]["quick"] is True
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


# uv's own shape: the error, then hints under it
UV_FAIL = (
    "echo 'Resolved 80 packages'; echo 'error: No solution found when resolving dependencies' >&2; "
    "echo 'hint: Pre-releases are available for torch' >&2; exit 1"
)
SMI_L = (
    '#!/bin/sh\n[ "$1" = -L ] || { echo "NVIDIA-SMI has failed because it couldn\'t communicate with '
    'the NVIDIA driver."; exit 9; }\n'  # nvidia-smi -L only; to the doctor, a driver not loaded
    'for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-6c4e0f6a-$i)"; done\n'
)


def test_a_failed_setup_is_its_error_line_and_an_accepted_key_is_said_even_so(client_env, ssh_hosts, repo):
    """Not uv's last `hint:`; and --accept-new's key stays recorded when a later step fails: it says so."""
    h = ssh_hosts[2]
    h.install_bin("uv", FAKE_UV)
    _configure(client_env, h.name, f"setup = {json.dumps(UV_FAIL)}\n")
    kh = client_env.known_hosts
    kh.write_text("".join(f"{line}\n" for line in kh.read_text().splitlines() if h.address not in line))
    p = _pippa(client_env, repo, "up", h.name, "--accept-new")
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last == (
        "pippa: t3: setup failed with exit status 1: error: No solution found when resolving dependencies"
    )
    assert f"{h.name}: recorded ssh-ed25519 key SHA256:" in p.stderr and str(kh) in p.stderr


def test_up_lists_each_gpu_on_one_line_at_80_columns(client_env, ssh_hosts, repo):
    h = ssh_hosts[0]
    h.install_bin("uv", FAKE_UV)
    h.install_bin("nvidia-smi", SMI_L)
    _configure(client_env, h.name, "setup = []\nsecrets = []\n")
    p = subprocess.run(
        [PIPPA, "up", h.name],
        env={**client_env.env, "COLUMNS": "80"},
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("GPUs"))
    assert [ln.split()[-4:] for ln in lines[first : first + 8]] == [
        [f"{i}:", "NVIDIA", "H100", "80GB", "HBM3"][-4:] for i in range(8)
    ], p.stdout
    assert lines[first + 8].startswith("driver") and "UUID" not in p.stdout
