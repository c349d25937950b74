"""Hands a hot verb to the warm process (``instant.server``) instead of importing typer here.

Standard library only (and ``keeper.wire``, which is too): this module is all a warm ``pippa ps``
imports. The command line, working directory, environment and umask go to the warm process; once it
has acknowledged them, the go-ahead carries this process's stdin, stdout and stderr (SCM_RIGHTS), so
its child writes to this terminal, sees its width and whether it is one (a warm process that does not
acknowledge, stopped or slow, never gets them: the command runs here, and no reader waits for it);
this process forwards Ctrl-C (and TERM, HUP, QUIT) to that child and exits with its exit status.
The socket is guarded as the keeper's is: a private directory, a 0600 socket owned by this user,
and the peer's uid checked on connect.

When to fall back to the typer app in this process (``None``): not a hot verb, reuse turned off
(``--no-reuse`` before the verb, ``PIPPA_NO_REUSE=1``), no warm process, one that refuses (another
interpreter or locale, code changed) or does not acknowledge in time. A command the warm process has
accepted never runs here as well: it forks only after this side's go-ahead.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import sys
import time

from pippa_ops.instant import hot_verb
from pippa_ops.transport import reuse
from pippa_ops.transport.keeper import wire

try:  # hashlib's import (OpenSSL) costs a command ~3 ms; the built-in module is the same function
    from _sha256 import sha256  # type: ignore[import-not-found]  # Python < 3.12
except ImportError:  # pragma: no cover - Python >= 3.12
    try:
        from _sha2 import sha256  # type: ignore[import-not-found, no-redef]
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from types import FrameType

# A live warm process acknowledges at once; past this it is given up (not forked) and the command runs
# here: a stopped one (a suspended laptop) costs a command this long, and holds none of its descriptors.
ACK_WAIT_S = 1.0
GO = b"G"  # client -> warm process: fork now (after its A); the child then sends S (pid) and X (status)
STARTUP_VARS = ("LANG", "LANGUAGE", "TZ")  # and every PYTHON* and LC_* variable
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
LENGTH = struct.Struct(">I")
PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the pippa_ops directory
# Started with -c, not -m: click names the program after a -m module ("python -m ..."), and a child
# must name it as the client's own start-up would (its sys.argv[0], which the child takes over).
SERVER_MAIN = "from pippa_ops.instant.server import main; raise SystemExit(main())"


def socket_file() -> str:
    """One warm process per user, home, Python environment, start-up variables and checkout (what its
    imports and streams depend on). A string: pathlib's import would cost every command ~4 ms."""
    home = os.path.expanduser("~")  # what Path.home() is
    key = json.dumps([os.getuid(), home, sys.prefix, PACKAGE, startup_env(dict(os.environ))])
    return os.path.join(wire.runtime_path(), f"i-{sha256(key.encode()).hexdigest()[:20]}.sock")


def socket_path() -> Path:
    from pathlib import Path

    return Path(socket_file())


def startup_env(env: dict[str, str]) -> dict[str, str]:
    """The variables a Python reads as it starts (stream encodings, flags, the time zone): a warm process
    only serves a client that has the same ones, so its child's streams and clock are this process's."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k in STARTUP_VARS}


def run_warm(argv: list[str]) -> int | None:
    """Run ``pippa ARGV`` in a child of the warm process: its exit status, or None to run it here."""
    if hot_verb(argv) is None or reuse.turned_off_by_env() or not hasattr(socket, "send_fds"):
        return None
    path = socket_file()
    sock = _connect(path)
    if sock is None:
        if "--help" not in argv and wire.private_dir(os.path.dirname(path), create=True):
            import atexit

            atexit.register(_spawn, path)  # as the keeper is: after this command, so it costs it nothing
        return None
    with sock:
        reader = wire.FrameReader(sock)
        try:
            umask = os.umask(0)
            os.umask(umask)
            request = {
                "argv": argv,
                "argv0": sys.argv[0],
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "umask": umask,
                "prefix": sys.prefix,
                "package": PACKAGE,
                "path": sys.path,
            }
            payload = json.dumps(request).encode()
            sock.sendall(LENGTH.pack(len(payload)) + payload)  # no descriptor goes with the request
            got = reader.next(time.monotonic() + ACK_WAIT_S)
        except (OSError, TimeoutError, wire.ProtocolError, ValueError):
            return None  # a stopped warm process (a suspended laptop, a debugger) holds nothing of ours
        if got is None or got[0] != wire.ACK:
            return None  # refused, or gone: nothing was forked
        try:
            _send_with_stdio(sock, wire.frame(GO))
        except OSError:
            return None  # it forks only on reading GO whole, with the descriptors, so it did not
        return _relay(reader)


def _connect(path: str) -> socket.socket | None:
    """A connection to this user's warm process, checked as the keeper's are; None: no usable one."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (
        not stat.S_ISSOCK(st.st_mode)
        or st.st_uid != os.getuid()
        or not wire.private_dir(os.path.dirname(path), create=False)
    ):
        return None
    try:
        sock = wire.connect(path, ACK_WAIT_S)
    except OSError:
        return None
    if not wire.peer_is_me(sock):
        sock.close()
        return None
    return sock


def _send_with_stdio(sock: socket.socket, data: bytes) -> None:
    """The go-ahead, with this process's fds 0, 1 and 2 attached to its first byte: sent only once the
    warm process has acknowledged the request, so a warm process that stops (SIGSTOP) before it does
    never holds this terminal's or this pipe's descriptors (a reader to EOF would wait for it)."""
    sent = socket.send_fds(sock, [data], [0, 1, 2])
    if sent < len(data):
        sock.sendall(data[sent:])


def _relay(reader: wire.FrameReader) -> int:
    """Wait for the child's exit status, forwarding the signals a terminal sends to it."""
    pid: list[int] = []
    pending: list[int] = []
    sent: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        sent.append(signum)
        if pid:
            try:  # noqa: SIM105 - contextlib's import would cost every warm command
                os.kill(pid[0], signum)
            except OSError:
                pass
        else:
            pending.append(signum)

    for sig in FORWARDED:
        try:  # noqa: SIM105
            signal.signal(sig, forward)
        except (OSError, ValueError):
            pass
    while True:
        try:
            got = reader.next()
        except (OSError, wire.ProtocolError):
            got = None
        if got is None:
            if sent:  # the child died of the signal forwarded to it: so does this process, as a cold one
                signal.signal(sent[-1], signal.SIG_DFL)
                os.kill(os.getpid(), sent[-1])
            print("pippa: the warm process's command ended without an exit status", file=sys.stderr)
            return 1
        kind, payload = got
        if kind == wire.STARTED:
            pid.append(int(json.loads(payload)["pid"]))
            for signum in pending:
                try:  # noqa: SIM105
                    os.kill(pid[0], signum)
                except OSError:
                    pass
        elif kind == wire.EXIT:
            return wire.parse_status(payload)


def _spawn(path: str) -> None:
    """Start the warm process for this context, detached (it exits at once if one is starting).

    Its environment is this one, unchanged: it serves only clients with the same start-up variables
    (``startup_env``), and it checks that it imported this checkout's package."""
    import subprocess

    from pippa_ops.transport import after_exit

    try:  # noqa: SIM105
        subprocess.Popen(
            # once this process has ended: its start costs this command nothing
            after_exit.command(os.getpid(), [sys.executable, "-c", SERVER_MAIN, path]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,  # not ended by this terminal's Ctrl-C or hangup
        )
    except OSError:
        pass
