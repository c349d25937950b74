"""Every code reward's memory-resident /usr (``usrcopy``): what it holds, and where it cannot be made."""

from __future__ import annotations

import os
import shutil
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
    finally:
        shutil.rmtree(copy.root)
