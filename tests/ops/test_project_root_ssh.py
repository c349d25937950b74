"""pippa never takes another project's checkout for its own: from another git checkout or a fresh
``git init``, ``recipes``, ``run``, ``sync``, ``up`` and ``pull`` act on pippa's own checkout (and say
so in one line), or, where pippa was installed as a package and not from a checkout, refuse in one
line; ``sync --delete`` that would delete more than a handful of host files asks first, and refuses
off a terminal without ``--yes``. No file on the host is deleted. Real parts: a loopback sshd host."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from sshd import SSHHost

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[2]  # the checkout this pippa is installed from (editable)
EXTRA = [f"theirs/file{i}.txt" for i in range(8)]  # on the host, not in the tree sent: a --delete target


@pytest.fixture(params=["other-checkout", "fresh-init"])
def elsewhere(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The working directory: another project's git checkout (a commit, files), or a fresh `git init`."""
    d = tmp_path / request.param
    d.mkdir()
    if request.param == "other-checkout":
        (d / "README.md").write_text("another project\n")
        (d / "src").mkdir()
        (d / "src" / "main.py").write_text("print('theirs')\n")
        ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
        for argv in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "x"]):
            subprocess.run(["git", *argv], cwd=d, check=True)
    else:
        subprocess.run(["git", "init", "-q", str(d)], check=True)
    return d


@pytest.fixture
def host(client_env: ClientEnv, ssh_hosts: list[SSHHost]) -> Iterator[tuple[SSHHost, Path]]:
    """Host t2 with a remote_dir of this test's own holding files of its own; no setup for `up`."""
    h = ssh_hosts[1]
    name = f"root-{uuid.uuid4().hex[:8]}"
    inv = client_env.personal_inventory
    head = f"[hosts.{h.name}]\n"
    fields = f'remote_dir = "~/{name}"\nsetup = []\nsecrets = []\n'
    inv.write_text(inv.read_text().replace(head, head + fields, 1))
    remote = h.home / name
    h.run_as_user(["mkdir", "-p", str(remote / "theirs")]).check_returncode()
    for rel in EXTRA:
        h.run_as_user(["sh", "-c", f"echo kept > {remote / rel}"]).check_returncode()
    yield h, remote
    h.run_as_user(["tmux", "kill-server"])
    h.run_as_user(["rm", "-rf", str(remote)])


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _extra_still_there(remote: Path) -> bool:
    return all((remote / rel).read_text() == "kept\n" for rel in EXTRA)


def test_from_another_checkout_pippa_acts_on_its_own_checkout_and_says_so(client_env, host, elsewhere):
    h, remote = host
    env = client_env.env
    why = f"({elsewhere} is not a pippa project)"

    def pippa(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([PIPPA, *args], elsewhere, env)

    p = pippa("recipes")
    assert p.returncode == 0 and "tiny " in p.stdout, p.stderr
    assert p.stderr == f"pippa: the recipes of {REPO} {why}\n"

    p = pippa("sync", h.name, "--delete")  # off a terminal, without --yes: refused, nothing changed
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout.splitlines()[0] == f"sending {REPO} {why}"
    (line,) = p.stderr.splitlines()
    assert f"would delete {len(EXTRA)} file(s) in {h.name}:" in line and f"to match {REPO}" in line, line
    assert "--yes" in line and _extra_still_there(remote)
    assert sorted(x.name for x in remote.iterdir()) == ["theirs"]  # nothing was sent either

    p = pippa("up", h.name)
    assert p.returncode == 0, p.stderr
    assert f"pippa: sending {REPO} {why}" in p.stderr
    assert (remote / "recipes" / "tiny.toml").read_text() == (REPO / "recipes" / "tiny.toml").read_text()
    assert not (remote / "src").exists() and _extra_still_there(remote)  # pippa's tree, nothing deleted

    p = pippa("sync", h.name, "--delete", "--dry-run")  # the list, and still nothing deleted
    assert p.returncode == 0 and f"  delete {EXTRA[0]}" in p.stdout and _extra_still_there(remote)

    p = pippa("run", "tiny", "--host", h.name, "--name", "root-tiny", "--no-wait")
    assert p.returncode == 0 and p.stdout.startswith("started "), p.stderr
    assert p.stderr == f"pippa: running from {REPO} {why}\n"

    p = pippa("pull", "no-such-run", "--host", h.name)  # where it would write, then why it cannot
    assert p.stdout.splitlines()[0] == f"writing into {REPO / 'runs'} {why}"
    assert p.returncode == 9 and "no-such-run" in p.stderr


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """pippa installed as a package (its packages in a site directory, no checkout around them)."""
    site = tmp_path / "site"
    for pkg in ("pippa_ops", "pippa_agent", "pippa_contract"):
        shutil.copytree(REPO / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return site


def test_installed_as_a_package_pippa_refuses_in_one_line_outside_a_project(
    client_env, host, elsewhere, installed
):
    h, remote = host
    env = {**client_env.env, "PYTHONPATH": str(installed)}
    entry = "import sys; from pippa_ops.cli.app import main; sys.argv[0] = 'pippa'; main()"
    commands = [
        ["recipes"],
        ["run", "tiny", "--host", h.name, "--no-wait"],
        ["sync", h.name],
        ["sync", h.name, "--delete", "--yes"],
        ["up", h.name],
        ["pull", "some-run", "--host", h.name],
    ]
    for args in commands:
        p = _run([sys.executable, "-c", entry, *args], elsewhere, env)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        (line,) = p.stderr.splitlines()
        assert line == (
            f"pippa: {elsewhere} is not a pippa project (it needs pippa.toml, or recipes/ and "
            "training_core/), and pippa was not installed from one: run pippa from your pippa "
            "checkout"
        ), (args, line)
    assert sorted(x.name for x in remote.iterdir()) == ["theirs"] and _extra_still_there(remote)
