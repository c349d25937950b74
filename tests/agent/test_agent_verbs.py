"""The host agent (pippa_agent): its functions called directly, and whole requests through the
host ``local`` (the same bootstrap and framing SSH uses). Every test has its own HOME."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from pippa_agent import probe as agent_probe
from pippa_agent import runs as agent_runs
from pippa_agent import sync as agent_sync
from pippa_contract import errors as agent_errors
from pippa_ops.errors import RemoteCommandFailed, SessionExists, ToolMissing
from pippa_ops.runs.records.follow import Follower, read_all
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import LocalTransport

HOST_FILES = sorted(Path(agent_probe.__file__).parent.glob("*.py")) + sorted(
    Path(agent_errors.__file__).parent.glob("*.py")
)  # the agent bundle and its bootstrap


def test_every_test_has_its_own_home_not_the_users() -> None:
    import pwd

    assert Path.home() != Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert not (Path.home() / ".config" / "pippa" / "secrets.env").exists()


def test_agent_is_python_3_8_and_stdlib_only() -> None:
    imported = set()
    for node in (n for f in HOST_FILES for n in ast.walk(ast.parse(f.read_text(), feature_version=(3, 8)))):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"pippa_agent", "pippa_contract"}
    assert imported <= allowed, imported - allowed


def test_one_request_runs_through_the_constant_bootstrap_on_local(tmp_path: Path) -> None:
    t = LocalTransport()
    (tmp_path / "runs").mkdir()
    answer = agent_client.call(t, "list_runs", {"remote_dir": str(tmp_path)})
    assert answer["runs"] == [] and answer["now"] == pytest.approx(time.time(), abs=30)
    assert agent_client.command(t) == agent_client.command(t)  # nothing of the request in argv


def test_a_host_without_python3_is_told_what_pippa_needs() -> None:
    t = LocalTransport()
    t.agent_python = "/nonexistent/python3"
    with pytest.raises(ToolMissing, match=r"python3 >= 3\.8"):
        agent_client.call(t, "probe", {})


def test_an_unknown_verb_is_a_remote_failure() -> None:
    with pytest.raises(RemoteCommandFailed, match="unknown verb"):
        agent_client.call(LocalTransport(), "nosuch", {})


def test_probe_reports_python_disk_and_the_sandbox(tmp_path: Path) -> None:
    facts = agent_probe.probe({"remote_dir": str(tmp_path / "not" / "yet")})
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert facts["free_disk_gb"] > 0
    sb = facts["sandbox"]
    assert set(sb) >= {"bwrap", "works", "why", "root", "sudo", "userns", "apt"}
    assert sb["root"] == (os.geteuid() == 0)
    if sb["bwrap"] is None:
        assert not sb["works"] and "bubblewrap" in sb["why"]
    assert sb["level"] in ("strict", "rlimits", "unsafe")
    if sb["works"] and sb["seccomp"]:
        assert sb["level"] == ("strict" if sb["cgroups"] else "rlimits")


def test_strict_needs_usable_memory_and_pids_controllers_not_a_writable_cgroup_directory(
    tmp_path: Path,
) -> None:
    """A writable tree without the controllers (plain directories here) is not promised as strict; on
    this machine the answer is the trainer's own (CgroupSlots.create), and no probe cgroup is left."""
    from training_core.sandbox.cgroups import CgroupSlots

    if os.geteuid() != 0:
        pytest.skip("only root may cap a run's processes with cgroups")
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for ctrl in ctrls.split(","):
            own[ctrl] = path.lstrip("/")
    for ctrl in ("memory", "pids"):
        (tmp_path / ctrl / own.get(ctrl, "")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / own.get("", "")).mkdir(parents=True, exist_ok=True)
    assert agent_probe.cgroup_caps(str(tmp_path)) is False
    assert not list(tmp_path.rglob("pippa-probe-*"))
    slots = CgroupSlots.create()
    try:
        assert agent_probe.cgroup_caps() is (slots is not None)
    finally:
        if slots is not None:
            slots.remove()
    for ctrl in ("memory", "pids", ""):
        if ctrl in own:
            assert not list((Path("/sys/fs/cgroup") / ctrl / own[ctrl]).parent.glob("*/pippa-probe-*"))


def test_install_uv_names_each_failed_try_not_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(argv: list[str], timeout: float = 60, input: bytes | None = None, env: dict | None = None):
        if argv[0] == "curl":
            return subprocess.CompletedProcess(argv, 6, b"", b"curl: (6) Could not resolve host: astral.sh\n")
        if argv[1:3] == ["-m", "venv"]:
            err = b"Error: ensurepip is not available\nhint: apt install python3-venv\n"
            return subprocess.CompletedProcess(argv, 1, b"", err)
        return subprocess.CompletedProcess(argv, 127, b"", b"uv: not found")

    monkeypatch.setattr(agent_probe, "run", fake_run)
    monkeypatch.setattr(agent_probe, "which", lambda tool: "/usr/bin/curl" if tool == "curl" else None)
    answer = agent_probe.install_uv({})
    assert answer["uv"] is None
    assert answer["failures"] == [
        "downloading the uv installer: curl: (6) Could not resolve host: astral.sh",
        "python3 -m venv: Error: ensurepip is not available",
    ]


def _run_dir(base: Path, run_id: str, meta: dict, **files: str) -> Path:
    d = base / "runs" / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(meta))
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_list_runs_reads_json_not_text_and_finds_the_error_line(tmp_path: Path) -> None:
    meta = {"run_id": "r-1", "session": "s", "command": "x"}
    _run_dir(
        tmp_path,
        "r-1",
        meta,
        exit_code="1\n",
        started="5\n",
        **{"output.log": "step 1\nTraceback (most recent call last):\nValueError: bad lr\nbye\n"},
        **{"metrics.jsonl": '{"type":"step","step":1}\n{"type":"step",  "step":2,"reward":1}\n{"type":"st'},
    )
    _run_dir(tmp_path, "r-2", {"run_id": "r-2", "session": "s"}, exit_code="0\n")
    (tmp_path / "runs" / "r-3").mkdir()  # no run.json yet: skipped
    out = agent_runs.list_runs({"remote_dir": str(tmp_path)})
    by_id = {r["run_id"]: r for r in out["runs"]}
    assert set(by_id) == {"r-1", "r-2"}
    r1 = by_id["r-1"]
    assert [s["step"] for s in r1["steps"]] == [1, 2]  # any JSON spacing
    assert (r1["exit_code"], r1["started"], r1["error"]) == ("1", "5", "ValueError: bad lr")
    assert "error" not in by_id["r-2"]


def test_read_run_answers_the_listing_the_run_a_name_means_and_its_output_in_one_agent_process(
    tmp_path: Path,
) -> None:
    from pippa_ops.errors import AmbiguousSession, UsageError
    from pippa_ops.runs.records.listing import current_run, list_runs, read_run

    class Counting(LocalTransport):
        starts = 0

        def start(self, command: str):  # type: ignore[no-untyped-def]
            Counting.starts += 1
            return super().start(command)

    old, new = "20260101-000100-x-1111", "20260101-000200-x-2222"
    for rid, when, log in ((old, "100", "old\n"), (new, "200", "one\ntwo\n")):
        _run_dir(
            tmp_path,
            rid,
            {"run_id": rid, "session": "rr", "command": "x"},
            started=when,
            exit_code="0\n",
            **{"output.log": log},
        )
    t = Counting()
    listed, chosen, out = read_run(t, str(tmp_path), "rr")
    assert Counting.starts == 1 and (chosen, out) == (new, b"one\ntwo\n")
    assert listed.runs == list_runs(LocalTransport(), str(tmp_path)).runs  # the listing, as list_runs'
    assert current_run(listed, "rr").run_id == new
    assert read_run(t, str(tmp_path), "1111")[1:] == (old, b"old\n")
    assert read_run(t, str(tmp_path), None)[1:] == (new, b"one\ntwo\n")  # no name: the newest run
    assert read_run(t, str(tmp_path), "nosuch")[1:] == (None, b"")
    listed, chosen, out = read_run(t, str(tmp_path), "20260101")  # fits both: the laptop says so
    assert (chosen, out) == (None, b"")
    with pytest.raises(AmbiguousSession):
        current_run(listed, "20260101")
    assert read_run(t, str(tmp_path / "none"), "rr")[1:] == (None, b"")  # no runs dir: no runs
    with pytest.raises(UsageError, match="path must be absolute"):
        read_run(t, "relative/dir", "rr")  # the agent's expected failure, as its typed error


def test_follow_streams_from_the_offset_until_the_end_file_appears(tmp_path: Path) -> None:
    log, end = tmp_path / "output.log", tmp_path / "exit_code"
    log.write_bytes(b"0123456789")
    f = Follower(LocalTransport(), str(log), 4, end_file=str(end))
    got = bytearray()
    for chunk in f.chunks():
        got += chunk
        if got == b"456789":
            with open(log, "ab") as fh:
                fh.write(b"-more")
            end.write_text("0\n")
    assert bytes(got) == b"456789-more" and f.offset == 15
    assert read_all(LocalTransport(), str(log), 10) == b"-more"
    assert read_all(LocalTransport(), str(tmp_path / "missing")) == b""


def test_follow_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    f = Follower(LocalTransport(), str(log), 0, end_file=str(tmp_path / "done"))
    chunks = f.chunks()
    time.sleep(0.3)
    log.write_bytes(b"hello\n")
    assert next(chunks) == b"hello\n"
    (tmp_path / "done").touch()
    assert list(chunks) == []


def _tar_gz(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo("./" + name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return buf.getvalue()


def _apply(root: Path, files: dict[str, bytes], delete: list[str] = (), links: dict[str, str] | None = None):  # type: ignore[assignment]
    t = LocalTransport()
    send = sorted([*files, *(links or {})])
    args = {"remote_dir": str(root), "send": send, "delete": list(delete), "marker": {"files": 1}}
    with agent_client.start(t, "sync_apply", args) as proc:
        proc.write(_tar_gz(files, links))
        proc.close_stdin()
        out = b""
        while chunk := proc.read():
            out += chunk
        status = proc.wait(30)
        assert status == 0, proc.stderr_text()
    return json.loads(out)


def test_sync_never_writes_through_a_host_side_symlinked_directory(tmp_path: Path) -> None:
    root, outside = tmp_path / "remote", tmp_path / "outside"
    outside.mkdir()
    _apply(root, {"top.txt": b"t"}, links={"data": str(outside)})  # an earlier sync of a repo symlink
    assert (root / "data").is_symlink()
    # The repo now has a real directory there (a fresh top-level dir and a nested one).
    (root / "pkg").mkdir()
    (root / "pkg" / "sub").symlink_to(outside)
    _apply(root, {"data/a.py": b"A", "pkg/sub/b.py": b"B"})
    assert list(outside.iterdir()) == [], "a file landed outside remote_dir"
    assert not (root / "data").is_symlink() and (root / "data" / "a.py").read_bytes() == b"A"
    assert not (root / "pkg" / "sub").is_symlink() and (root / "pkg" / "sub" / "b.py").read_bytes() == b"B"
    assert json.loads((root / ".pippa" / "sync.json").read_text()) == {"files": 1}
    assert [p.name for p in (root / ".pippa").iterdir()] == ["sync.json"], "the stage is gone"


def test_sync_apply_replaces_files_and_deletes_but_not_through_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "remote", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.py").write_text("k")
    _apply(root, {"a/x.py": b"1", "b.py": b"2"}, links={"ln": str(outside)})
    _apply(root, {"a/x.py": b"new"}, delete=["b.py", "ln/keep.py"])
    assert (root / "a" / "x.py").read_bytes() == b"new" and not (root / "b.py").exists()
    assert (outside / "keep.py").exists()


def test_sync_apply_refuses_paths_that_leave_remote_dir(tmp_path: Path) -> None:
    with pytest.raises(agent_errors.AgentError):
        agent_sync.safe_rel("../x")
    with pytest.raises(agent_errors.AgentError):
        agent_sync.safe_rel("runs/x")
    assert agent_sync.safe_rel("a/b.py") == "a/b.py"


def test_sync_list_lists_files_and_symlinks_without_following_them(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("abc")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x").write_text("no")
    (tmp_path / "dirlink").symlink_to(tmp_path / "pkg")
    out = agent_sync.sync_list({"remote_dir": str(tmp_path)})
    rows = {name: size for name, size, _ in out["files"]}
    assert rows == {"pkg/m.py": 3, "dirlink": len(str(tmp_path / "pkg"))}
    assert agent_sync.sync_list({"remote_dir": str(tmp_path / "absent")})["files"] == []


def test_launch_refuses_an_existing_session_without_touching_it(tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple[str, ...]] = []

    def fake_tmux(*args: str) -> subprocess.CompletedProcess:
        calls.append(args)
        return subprocess.CompletedProcess(["tmux", *args], 0, b"$1@5\n", b"")

    monkeypatch.setattr(agent_runs, "tmux", fake_tmux)
    monkeypatch.setattr(agent_runs, "which", lambda tool: "/usr/bin/" + tool)
    req = {"remote_dir": str(tmp_path), "session": "s", "runs": [], "tmux_argv": ["tmux", "x"], "stamp": 5}
    with pytest.raises(agent_errors.AgentError) as e:
        agent_runs.launch(req)
    assert e.value.kind == "session_exists" and calls == [("has-session", "-t", "=s")]
    _run_dir(tmp_path, "old-1", {"session": "s"})
    _run_dir(tmp_path, "other-1", {"session": "s2"})
    run = {"run_id": "new-1", "run_json": "{}", "cmd_sh": "#!/bin/sh\n"}
    assert agent_runs.launch({**req, "replace": True, "runs": [run]}) == {"identity": "$1@5"}
    assert (tmp_path / "runs" / "old-1" / "stop_requested").read_text() == "5\n"
    assert not (tmp_path / "runs" / "other-1" / "stop_requested").exists()
    assert ("rename-session", "-t", "=s", "s-replaced-5") in calls and calls[-1] == (
        "kill-session",
        "-t",
        "=s-replaced-5",
    )
    assert (tmp_path / "runs" / "new-1" / "tmux_session").read_text() == "$1@5\n"


def test_session_exists_reaches_the_laptop_as_its_typed_error(tmp_path: Path) -> None:
    t = LocalTransport()
    answer = b'{"error": "session_exists", "message": "session s exists"}\n'
    with pytest.raises(SessionExists):
        agent_client.parse_answer(t, "launch", answer)
