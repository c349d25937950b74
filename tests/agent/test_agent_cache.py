"""What makes an operation cheap on the host: the agent cached there (compiled, by content hash, in a
private directory, never a file another user could have written) and one agent process per operation.
Run through the host ``local`` (the same bootstrap SSH uses); every test has its own HOME."""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from projects import make_project

from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.launching import launch
from pippa_ops.sync import sync
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import LocalTransport, Process


class CountingTransport(LocalTransport):
    """``local`` seen as a remote host (so sync lists and sends through the agent); counts the
    commands started on it (each one an agent process: a Python start-up on the host)."""

    is_local = False

    def __init__(self) -> None:
        super().__init__("counted")
        self.starts = 0

    def start(self, command: object) -> Process:
        self.starts += 1
        return super().start(command)  # type: ignore[arg-type]


def cache_file() -> Path:
    tag = sys.implementation.cache_tag  # LocalTransport runs the agent with this interpreter
    return Path.home() / ".cache" / "pippa" / f"agent-{agent_client.digest()}-{tag}.code"


def test_the_agent_is_cached_privately_on_first_use_and_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = LocalTransport()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})
    f = cache_file()
    assert f.parent.stat().st_mode & 0o777 == 0o700 and f.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(agent_client, "program", lambda: pytest.fail("the cached agent was sent again"))
    assert agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})["runs"] == []


def _plant(path: Path, pwned: Path) -> None:
    """A cache file with a valid checksum line whose code would leave ``pwned`` behind."""
    code = marshal.dumps(compile(f"open({str(pwned)!r}, 'w').close()\ndef serve(q): pass\n", "x", "exec"))
    check = hashlib.sha256(agent_client.digest().encode() + code).hexdigest().encode() + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(check + code)


@pytest.mark.parametrize("case", ["group-writable file", "open directory", "wrong checksum"])
def test_a_cached_agent_others_could_have_written_is_never_run(case: str, tmp_path: Path) -> None:
    f, pwned = cache_file(), tmp_path / "pwned"
    _plant(f, pwned)
    os.chmod(f.parent, 0o700)
    os.chmod(f, 0o600)
    if case == "group-writable file":
        os.chmod(f, 0o620)
    elif case == "open directory":
        os.chmod(f.parent, 0o757)
    else:
        data = f.read_bytes()
        f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert agent_client.call(LocalTransport(), "list_runs", {"remote_dir": str(tmp_path)})["runs"] == []
    assert not pwned.exists()
    assert f.parent.stat().st_mode & 0o777 == 0o700  # the agent made the directory private again
    assert b"def serve(first" not in f.read_bytes() and f.stat().st_mode & 0o777 == 0o600  # replaced


def test_one_session_answers_several_requests_in_one_agent_process(tmp_path: Path) -> None:
    t = CountingTransport()
    with agent_client.Session(t) as s:
        s.call("sync_marker", {"remote_dir": str(tmp_path), "marker": {"n": 1}})
        assert s.call("sync_list", {"remote_dir": str(tmp_path)})["files"] == []
        s.call("write_file", {"path": str(tmp_path / "x.txt"), "text": "hi"})
    assert t.starts == 1 and (tmp_path / "x.txt").read_text() == "hi"


def _repo(path: Path) -> Path:
    make_project(path, git=False)
    (path / "a.py").write_text("x = 1\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for argv in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=path, check=True)
    return path


def test_a_sync_is_one_agent_process_whether_files_travel_or_not(tmp_path: Path) -> None:
    repo, remote = _repo(tmp_path / "repo"), tmp_path / "remote"
    spec = HostSpec(name="counted", address="x", remote_dir=str(remote))
    t = CountingTransport()
    assert sync(spec, t, repo).sent == ("a.py",) and t.starts == 1  # listing + files
    assert sync(spec, t, repo).sent == () and t.starts == 2  # listing + marker
    assert (remote / "a.py").read_text() == "x = 1\n" and (remote / ".pippa" / "sync.json").exists()


def test_a_launch_after_a_no_change_sync_is_one_agent_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, remote = _repo(tmp_path / "repo"), tmp_path / "remote"
    monkeypatch.chdir(repo)
    spec = HostSpec(name="counted", address="x", remote_dir=str(remote))
    t = CountingTransport()
    sync(spec, t, repo)
    before = t.starts
    session = f"cache-{os.getpid()}"
    try:
        launch.launch(spec, t, command="true", session=session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", "=" + session], capture_output=True)
    assert t.starts - before == 1


def test_storing_a_new_agent_deletes_versions_unused_for_two_weeks_and_a_use_keeps_a_version(
    tmp_path: Path,
) -> None:
    d = cache_file().parent
    d.mkdir(parents=True, mode=0o700, exist_ok=True)
    old, recent = d / "agent-old-cpython-38.code", d / "agent-recent-cpython-38.code"
    for f, age_days in ((old, 30), (recent, 3)):
        f.write_bytes(b"x")
        os.utime(f, (f.stat().st_atime, f.stat().st_mtime - age_days * 86400))
    t = LocalTransport()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})  # stores this version
    assert cache_file().exists() and recent.exists() and not old.exists()
    stale = cache_file().stat().st_mtime - 20 * 86400
    os.utime(cache_file(), (stale, stale))
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})  # a cache hit touches it
    assert cache_file().stat().st_mtime > stale + 19 * 86400


def test_a_cached_agent_is_ready_before_its_first_request(tmp_path: Path) -> None:
    """An agent a connection keeper starts ahead of its command answers ``+`` and imports what the
    common verbs need (``serve.prepare``) before any request comes; the request is then answered."""
    t = LocalTransport()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})  # cached now
    proc = t.start(agent_client.command(t))
    try:
        proc.set_deadline(time.monotonic() + 30)
        assert proc.read(1) == b"+"  # no request written yet
        time.sleep(0.5)  # prepare's imports, with nothing waiting on stdin
        request = {"verb": "list_runs", "args": {"remote_dir": str(tmp_path)}}
        proc.write(agent_client.frame(json.dumps(request).encode()))
        answer = json.loads(proc.readline())
        assert answer["runs"] == [] and "sessions" in answer
    finally:
        proc.kill()


def program_file() -> Path:
    return cache_file().parent / f"agent-{agent_client.digest()}.pyz"


def test_the_cached_bundle_is_also_a_private_zipapp_that_runs_only_as_its_sha_says(tmp_path: Path) -> None:
    """The host program (supervisor, @reboot line, alerts) is the bundle the bootstrap cached, as a
    zipapp named by its sha; a copy whose bytes do not match that sha, or that another user could have
    written, is refused; a cache that lost it is a cache miss that stores it again."""
    t = LocalTransport()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})
    pyz = program_file()
    assert pyz.stat().st_mode & 0o777 == 0o600 and pyz.parent.stat().st_mode & 0o777 == 0o700
    argv = ["python3", "-S", "-I", str(pyz), "recover", str(tmp_path)]
    ok = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout) == {"resumed": [], "skipped": []}, ok.stderr
    request = json.dumps({"verb": "list_runs", "args": {"remote_dir": str(tmp_path)}}).encode()
    framed = b"%d\n" % len(request) + request
    serve = ["python3", "-S", "-I", str(pyz), "serve"]
    served = subprocess.run(serve, input=framed, capture_output=True, timeout=60)
    assert served.returncode == 0 and json.loads(served.stdout)["runs"] == [], served.stderr

    os.chmod(pyz, 0o620)
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "another user" in refused.stderr
    os.chmod(pyz, 0o600)
    with zipfile.ZipFile(pyz) as z:
        main = z.read("__main__.py")
    with zipfile.ZipFile(pyz, "w") as z:  # the same loader, another bundle under the same name
        z.writestr("__main__.py", main)
        z.writestr("bundle.json", b"[]")
    forged = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert forged.returncode != 0 and "does not match its sha256" in forged.stderr

    pyz.unlink()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})  # a miss: the bundle is sent again
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout) == {"resumed": [], "skipped": []}


def test_cache_cleanup_keeps_a_version_a_running_run_names_until_it_ends(tmp_path: Path) -> None:
    d = cache_file().parent
    (d / "pins").mkdir(parents=True, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    sha = "a" * 64
    kept = [d / f"agent-{sha}.pyz", d / f"agent-{sha}-cpython-38.code"]
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (d / "pins" / "run-r1").write_text(json.dumps({"sha": sha, "run_dir": str(run_dir)}))
    for f in kept:
        f.write_bytes(b"x")
        os.utime(f, (f.stat().st_atime, f.stat().st_mtime - 30 * 86400))
    t = LocalTransport()
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})  # stores this version, cleans up
    assert all(f.exists() for f in kept), "a running run's program stays"

    (run_dir / "exit_code").write_text("0\n")
    cache_file().unlink()  # the next call stores again (and cleans up again)
    agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})
    assert not any(f.exists() for f in kept) and not (d / "pins" / "run-r1").exists()
