"""``transport.after_exit``: what a command starts as it exits (the keeper, the warm process) waits for
the command's end before it does anything, then becomes the program it was given (same pid)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from pippa_ops.transport import after_exit


def test_the_program_starts_only_once_the_process_has_ended(tmp_path: Path) -> None:
    mark = tmp_path / "started"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    code = f"import os, pathlib; pathlib.Path({str(mark)!r}).write_text(str(os.getpid()))"
    waiter = subprocess.Popen(after_exit.command(holder.pid, [sys.executable, "-c", code]))
    time.sleep(0.3)
    assert not mark.exists() and holder.poll() is None  # still waiting for the holder
    holder.wait()
    assert waiter.wait(timeout=30) == 0
    assert mark.read_text() == str(waiter.pid)  # an exec: the program has the waiter's pid


def test_a_process_already_gone_does_not_delay_it(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mark = tmp_path / "started"
    code = f"import pathlib; pathlib.Path({str(mark)!r}).touch()"
    p = subprocess.run(after_exit.command(gone.pid, [sys.executable, "-c", code]), timeout=30)
    assert p.returncode == 0 and mark.exists()


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    p = subprocess.run(
        [sys.executable, "-S", "-I", after_exit.PATH, "x"], capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("usage:")
