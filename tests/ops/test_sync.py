"""Sync end to end against a loopback host: file set, only changed files, --delete, dry run, interruption."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from pippa_ops.hosts.connect import connect
from pippa_ops.sync import sync

pytestmark = pytest.mark.ssh


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "pkg").mkdir(parents=True)
    (r / "pkg" / "mod.py").write_text("print('hi')\n")
    (r / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(r / "run.sh", 0o755)
    (r / ".gitignore").write_text("*.log\n__pycache__/\nwandb/\n.env\n")
    (r / ".pippaignore").write_text("data/\nsecret-notes.md\n")
    (r / "data").mkdir()
    (r / "data" / "big.bin").write_bytes(b"0" * 1000)
    (r / "secret-notes.md").write_text("tracked but pippaignored\n")
    (r / "train.log").write_text("ignored\n")
    (r / ".env").write_text("WANDB_API_KEY=sekrit\n")
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", "pkg", "run.sh", ".gitignore", ".pippaignore", "secret-notes.md")
    _git(r, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    (r / "untracked.txt").write_text("untracked, not ignored\n")
    return r


def _host_files(root: Path) -> set[str]:
    skip = (".pippa", "runs", ".venv")
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if not p.is_dir() and str(p.relative_to(root)).split("/")[0] not in skip
    }


def test_sync_sends_tracked_and_untracked_but_not_ignored_env_or_pippaignored(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[0]
    spec, t = connect(h.name)
    with t:
        t.run("rm -rf ~/pippa", check=True)  # the hosts are shared by the session: start from none
        result = sync(spec, t, repo)
    dest = h.home / "pippa"
    assert _host_files(dest) == {"pkg/mod.py", "run.sh", ".gitignore", ".pippaignore", "untracked.txt"}
    assert (dest / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert os.stat(dest / "run.sh").st_mode & 0o111, "exec bit kept"
    assert dest.stat().st_uid == h.uid
    marker = json.loads((dest / ".pippa" / "sync.json").read_text())
    git_head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    head = git_head.stdout.strip()
    assert (marker["commit"], marker["dirty"], marker["files"]) == (head, True, 5)
    assert result.files == 5 and len(result.sent) == 5 and result.bytes_sent > 0


def test_only_changed_files_travel(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[1]
    spec, t = connect(h.name)
    with t:
        sync(spec, t, repo)
        again = sync(spec, t, repo)
        assert again.sent == () and again.bytes_sent == 0
        blob = os.urandom(200_000)
        (repo / "pkg" / "weights.bin").write_bytes(blob)
        one = sync(spec, t, repo)
    assert one.sent == ("pkg/weights.bin",)
    assert one.bytes_sent <= 2 * len(blob)
    assert (h.home / "pippa" / "pkg" / "weights.bin").read_bytes() == blob


def test_delete_only_when_asked_and_never_protected_or_ignored_host_files(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[2]
    dest = h.home / "pippa"
    spec, t = connect(h.name)
    with t:
        t.run("rm -rf ~/pippa", check=True)  # no files left by other tests' syncs of this host
        sync(spec, t, repo)
        t.run(
            "cd ~/pippa && mkdir -p runs/r1 .venv/bin __pycache__ && echo 1 > runs/r1/output.log"
            " && echo x > .venv/bin/python && echo c > __pycache__/m.pyc && echo stray > stray.txt",
            check=True,
        )
        (repo / "untracked.txt").unlink()
        plain = sync(spec, t, repo)
        assert plain.deleted == () and (dest / "untracked.txt").exists()
        dry = sync(spec, t, repo, delete=True, dry_run=True)
        assert set(dry.deleted) == {"untracked.txt", "stray.txt"} and (dest / "stray.txt").exists()
        done = sync(spec, t, repo, delete=True)
    assert set(done.deleted) == {"untracked.txt", "stray.txt"}
    assert not (dest / "untracked.txt").exists() and not (dest / "stray.txt").exists()
    for kept in ("runs/r1/output.log", ".venv/bin/python", "__pycache__/m.pyc", ".pippa/sync.json"):
        assert (dest / kept).exists(), kept


def test_dry_run_changes_nothing_on_the_host(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[3]
    spec, t = connect(h.name)
    with t:
        t.run("rm -rf ~/pippa", check=True)
        result = sync(spec, t, repo, dry_run=True)
    assert result.dry_run and len(result.sent) == 5 and result.bytes_sent == 0
    assert not (h.home / "pippa").exists()


def test_interrupted_sync_leaves_no_partial_file(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[0]
    dest = h.home / "pippa"
    spec, t = connect(h.name)
    with t:
        sync(spec, t, repo)
        old = (dest / "pkg" / "mod.py").read_bytes()
        (repo / "pkg" / "mod.py").write_bytes(os.urandom(3_000_000))  # changed, big, incompressible
        (repo / "pkg" / "new.py").write_text("new\n")
        before = _host_files(dest)

        def interrupt(sent: int) -> None:
            if sent > 1_000_000:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            sync(spec, t, repo, progress=interrupt)
    assert (dest / "pkg" / "mod.py").read_bytes() == old
    assert _host_files(dest) == before
    deadline = time.monotonic() + 5
    while list((dest / ".pippa").glob("stage-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list((dest / ".pippa").glob("stage-*")), "stage removed when the host-side shell exits"


def test_local_host_only_writes_the_marker(repo, monkeypatch):
    from pippa_ops.hosts.inventory import local_spec
    from pippa_ops.transport.base import LocalTransport

    result = sync(local_spec(repo), LocalTransport(), repo)
    assert result.local and result.sent == ()
    assert json.loads((repo / ".pippa" / "sync.json").read_text())["files"] == 5


def test_a_directory_that_was_a_symlink_on_the_host_is_never_written_through(ssh_env, ssh_hosts, repo):
    h = ssh_hosts[3]
    outside = h.home / "outside"
    h.run_as_user(["sh", "-c", f"rm -rf ~/pippa {outside} && mkdir {outside}"]).check_returncode()
    (repo / "assets").symlink_to(outside)  # a repo symlink: synced as a symlink
    spec, t = connect(h.name)
    with t:
        sync(spec, t, repo)
        assert (h.home / "pippa" / "assets").is_symlink()
        (repo / "assets").unlink()  # later the repo has a real directory there
        (repo / "assets").mkdir()
        (repo / "assets" / "cfg.json").write_text("{}")
        sync(spec, t, repo)
    assert list(outside.iterdir()) == [], "a synced file landed outside remote_dir"
    dest = h.home / "pippa" / "assets"
    assert not dest.is_symlink() and (dest / "cfg.json").read_text() == "{}"
