"""Become a command once another process has ended: ``python -S -I after_exit.py PID ARGV...``.

A command that starts the connection keeper or the warm process as it exits, so that the next command
finds them, must not pay for their start: two Python processes importing asyncssh and typer on a
laptop's cores slow the command's own last milliseconds (its exit, which whoever waits for it sees).
So it starts this small program, run as a file with ``-S -I`` (no site, no environment: it imports
only the standard library, so nothing of pippa need be on its path, and it starts in a few ms), which
waits until PID has ended (a pidfd where Linux has one, else a poll), at most MAX_WAIT_S, and then
becomes ARGV: an exec, so the same pid, environment and stdin (the keeper reads its hosts from it).
"""

from __future__ import annotations

import os
import select
import sys
import time

MAX_WAIT_S = 2.0
PATH = os.path.abspath(__file__)  # what a spawner runs: [python, "-S", "-I", PATH, pid, *argv]


def command(pid: int, argv: list[str]) -> list[str]:
    """The argument list that runs ``argv`` once ``pid`` has ended."""
    return [sys.executable, "-S", "-I", PATH, str(pid), *argv]


def wait_for_exit(pid: int, timeout_s: float) -> None:
    """Return when process ``pid`` has ended (or is not there), or after ``timeout_s``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # not Linux >= 5.3: poll
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return  # the pid is another user's now: ours ended
            time.sleep(0.005)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(int(timeout_s * 1000))
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or not args[0].isdigit():
        print("usage: python -S -I after_exit.py PID PROGRAM [ARG...]", file=sys.stderr)
        return 2
    wait_for_exit(int(args[0]), MAX_WAIT_S)
    os.execv(args[1], args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
