"""Every code reward's memory-resident /usr (``usrcopy``): what it holds, and where it cannot be made."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from training_core.sandbox.usrcopy import UsrCopy


def test_where_no_copy_can_be_made_it_says_why(tmp_path: Path) -> None:
    why = UsrCopy.create("/opt/python/bin/python3")
    assert why == "the sandbox's python /opt/python/bin/python3 is not under /usr"
    assert UsrCopy.create("/usr/bin/python3", base=tmp_path) == f"{tmp_path} is not a tmpfs"


def test_the_copy_holds_the_interpreter_its_library_the_common_tools_and_their_libraries() -> None:
    python = os.path.realpath("/usr/bin/python3")
    if not os.path.isfile(python) or not Path("/dev/shm").is_dir():
        pytest.skip("no system python or /dev/shm")
    copy = UsrCopy.create(python)
    if isinstance(copy, str):
        pytest.skip(copy)
    try:
        root = copy.root
        assert (root / os.path.relpath(python, "/usr")).is_file()
        libs = {p.name for p in root.rglob("libc.so*")}
        assert libs and not list(root.rglob("test/test_*.py")) and (root / "bin" / "sh").exists()
        assert (root / "bin" / "python3").exists() and not (root / "bin" / "gcc").exists()
        assert all(os.stat(d).st_mode & 0o005 == 0o005 for d, _, _ in os.walk(root))  # any uid reads it
        # a sandbox sees the copy's name (mountinfo's root of /usr): it names no process of the host
        assert str(os.getpid()) not in root.name
        assert (root.parent / f".{root.name}.pid").read_text() == str(os.getpid())
    finally:
        shutil.rmtree(copy.root)


def test_a_copy_whose_trainer_died_is_removed_by_the_next_one() -> None:
    python = os.path.realpath("/usr/bin/python3")
    if not os.path.isfile(python) or not Path("/dev/shm").is_dir():
        pytest.skip("no system python or /dev/shm")
    stale = Path("/dev/shm/pippa-usr-0123456789abcdef")
    stale.mkdir()
    (stale / "x").write_text("x")
    owner = Path(f"/dev/shm/.{stale.name}.pid")
    owner.write_text(str(_exited_pid()))  # its trainer was killed
    copy = UsrCopy.create(python)
    try:
        assert not stale.exists() and not owner.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        owner.unlink(missing_ok=True)
        if not isinstance(copy, str):
            shutil.rmtree(copy.root)


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
