"""The warm process: the typer app, the hot verbs' modules and the core imported once; a child forked
per command runs it exactly as a cold ``pippa`` would, on the client's terminal.

Started by the first hot command that found none (``instant.client``), it serves one user, home,
Python environment and checkout, on a 0600 socket in the keeper's private directory; every client's
uid is checked. It stays single-threaded (a fork copies no other thread's held lock), imports nothing
whose import reads the environment or the terminal (the child applies the client's), and exits when
idle for the keeper's persist time, when its socket is taken over, or when a module it imported
changed on disk (the child would run old code), refusing that request so the client runs it itself.

A request: the client's argv, cwd, environment and umask, with its fds 0-2. The answer ``A`` (or ``!``
with why); the client's go-ahead; then the child sends ``S`` (its pid, for signals) and ``X`` (status).
The client sends nothing after its go-ahead, so the end of its connection before ``X`` is its death
(``kill -9``): the child then hangs up, as a cold command does when its terminal goes (``_watch_client``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from pippa_ops.instant import HOT, client, hot_verb
from pippa_ops.transport import agent_bundle
from pippa_ops.transport.keeper import wire

# What the hot verbs import; a child imports anything else itself, as a cold command would.
PRELOAD = (
    "pippa_ops.cli.typer_app",
    "pippa_ops.cli.run_cmd",
    "pippa_ops.cli.ps_cmd",
    "pippa_ops.cli.logs_cmd",
    "pippa_ops.cli.stop_cmd",
    "pippa_ops.runs.launching.startup",
    "pippa_ops.cli.run_tables",
    "pippa_ops.cli.gpus_cmd",
    "pippa_ops.cli.hosts_cmd",
    "pippa_ops.sync",
    "rich.progress",
    "pippa_ops.cli.wait_cmd",
    "pippa_ops.cli.doctor_cmd",
    "pippa_ops.cli.doctor_view",
    "pippa_ops.doctor",
    "pippa_ops.fanout",
    "pippa_ops.cli.wait_status",
    "pippa_ops.runs.reading.catalog",
    "pippa_ops.runs.records.listing",
    "pippa_ops.runs.records.follow",
    "pippa_ops.runs.reading.wait",
    "pippa_ops.provision.alerts",
    "pippa_ops.hosts.endpoint",
    "pippa_ops.notify",
    "pippa_ops.transport.keeper.client",
    "pippa_ops.transport.agent_client",
    "typer._click.decorators",  # what typer imports as a command runs (found by diffing sys.modules)
    "typer._click._textwrap",
    "rich._emoji_codes",
)
REQUEST_WAIT_S = 2.0  # a client sends its request, and its go-ahead, at once


class Refused(Exception):
    """This warm process cannot run that request as a cold command would; the client runs it."""

    def __init__(self, why: str, *, stale: bool = False) -> None:
        super().__init__(why)
        self.stale = stale  # this process is out of date (not only unfit for this client): it exits


def code_stamps() -> dict[str, int]:
    """Each imported pippa module's file and each file of the host agent's bundle (built here once),
    with its mtime: a child must not run code, or send a host an agent, older than the disk."""
    paths = [str(p) for p in agent_bundle.files()]
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] in ("pippa_ops", "pippa_contract") and path:
            paths.append(path)
    stamps = {}
    for path in paths:
        with contextlib.suppress(OSError):
            stamps[path] = os.stat(path).st_mtime_ns
    return stamps


def changed(stamps: dict[str, int]) -> bool:
    for path, mtime in stamps.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def _read_request(conn: socket.socket) -> dict[str, Any]:
    """The request (no descriptors come with it: they come with the go-ahead, ``_read_go``)."""
    conn.settimeout(REQUEST_WAIT_S)
    buf = bytearray()
    while len(buf) < 4:
        buf += _recv(conn)
    (n,) = client.LENGTH.unpack(bytes(buf[:4]))
    if n > wire.MAX_FRAME:
        raise Refused("request too large")
    while len(buf) < 4 + n:
        buf += _recv(conn)
    request: dict[str, Any] = json.loads(bytes(buf[4 : 4 + n]))
    return request


def _read_go(conn: socket.socket) -> list[int]:
    """The client's go-ahead and its fds 0-2 (attached to its first byte)."""
    conn.settimeout(REQUEST_WAIT_S)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        if not data:
            raise Refused("client went away")
        reader = wire.FrameReader()
        reader.feed(data)
        while (got := reader.pop()) is None:
            reader.feed(_recv(conn))
        if got[0] != client.GO or len(fds) != 3:
            raise Refused("no go-ahead with stdio")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _recv(conn: socket.socket) -> bytes:
    chunk = conn.recv(1 << 16)
    if not chunk:
        raise Refused("client went away")
    return chunk


def check(request: dict[str, Any], stamps: dict[str, int]) -> None:
    """Refuse what a child of this process would run differently from a fresh ``pippa``."""
    if request.get("prefix") != sys.prefix or request.get("package") != str(client.PACKAGE):
        raise Refused("another Python environment")
    if client.startup_env(dict(request.get("env", {}))) != client.startup_env(dict(os.environ)):
        raise Refused("another locale or Python setting")
    if list(request.get("path", []))[1:] != sys.path[1:]:
        # Same environment and variables (the socket's key), another import path: the environment was
        # reinstalled since this process started, and every client from now on would be refused.
        raise Refused("another import path", stale=True)
    if hot_verb(list(request.get("argv", []))) is None:
        raise Refused("not a hot verb")
    if changed(stamps):
        raise Refused("code changed", stale=True)


def serve(listener: socket.socket, path: Path, inode: int, persist_s: float) -> None:
    from pippa_ops.cli.app import COMMANDS
    from pippa_ops.cli.typer_app import build

    group = build(COMMANDS)  # the app's click group, with the hot verbs' commands built (typer's slow part)
    for verb in HOT:
        group.load(verb)
    stamps = code_stamps()
    # The host agent's bundle and bootstrap line (cached functions): built once here, not per command.
    agent_bundle.bootstrap()
    agent_bundle.program()
    # What is loaded now lives as long as this process: the collector need never walk it again, here
    # or in a child (which then also copies fewer pages when it runs).
    gc.collect()
    gc.freeze()
    last = time.monotonic()
    children: set[int] = set()
    while True:
        for child in list(children):
            try:
                if os.waitpid(child, os.WNOHANG)[0]:
                    children.discard(child)
            except ChildProcessError:
                children.discard(child)
        if not select.select([listener], [], [], 1.0)[0]:
            try:
                ours = os.stat(path).st_ino == inode
            except OSError:
                ours = False
            idle = not children and time.monotonic() - last > persist_s
            if not ours or idle or changed(stamps):
                return
            continue
        conn, _ = listener.accept()
        last = time.monotonic()
        with conn:
            if not wire.peer_is_me(conn):
                continue
            try:
                forked = _accept(conn, listener, stamps, group)
            except Refused:
                return  # stale (_accept told the client why)
            if forked is not None:
                children.add(forked)


def _accept(conn: socket.socket, listener: socket.socket, stamps: dict[str, int], group: Any) -> int | None:
    """Check one request, acknowledge it, and fork its child on the go-ahead; the child's pid."""
    try:
        request = _read_request(conn)
    except (OSError, ValueError, Refused):
        return None
    try:
        check(request, stamps)
    except Refused as e:
        with contextlib.suppress(OSError):
            conn.sendall(wire.json_frame(wire.ERROR, {"error": "refused", "message": str(e)}))
        if e.stale:
            raise
        return None
    try:
        conn.sendall(wire.frame(wire.ACK))
        fds = _read_go(conn)
    except (OSError, TimeoutError, wire.ProtocolError, Refused):
        return None
    try:
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, request, fds, group)  # never returns
        return pid
    finally:
        for fd in fds:
            os.close(fd)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int], group: Any) -> None:
    """Become the client's ``pippa``: its stdio, cwd, environment, umask, argv; then the app's main."""
    code = 1
    done = threading.Event()  # set once the command ended: a client that leaves then is no hang-up
    try:
        os.setpgid(0, 0)  # its own process group: a hang-up reaches what it started, never the warm process
        conn.settimeout(None)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a Python's start
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        fds.clear()  # closed: the caller's cleanup must not close them again
        _stdio()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()  # the same TZ (startup_env), but read again as a fresh interpreter would
        os.umask(int(request["umask"]))
        sys.argv = [str(request["argv0"]), *request["argv"]]
        sys.path[0] = str(request["path"][0])  # the client's script directory (or "" for -c)
        conn.sendall(wire.json_frame(wire.STARTED, {"pid": os.getpid()}))
        _watch_client(conn, done)
        from pippa_ops.cli.typer_app import main

        try:
            main(group.table, group)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        done.set()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        # The client's stdio let go before its exit status is sent: whoever reads its output (a pipe,
        # `$(pippa ps)`) sees the end when the client exits, not after this child's own exit work.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        with contextlib.suppress(OSError):
            conn.sendall(wire.frame(wire.EXIT, wire.status_payload(code)))
        conn.close()
    # Unwinds to the interpreter's exit, as a cold command ends: its exit handlers run (a keeper started
    # for the hosts it used, which prints nothing); the warm process's own cleanup is skipped in a
    # child (``main``).
    raise SystemExit(code)


def _watch_client(conn: socket.socket, done: threading.Event) -> None:
    """When the client's connection ends before the command does (the client was killed: nothing else
    closes it early), SIGHUP to this child's process group: the command and what it started (a sync's
    packers) end as a cold command's do when its terminal hangs up; a command that must finish whole
    ignores SIGHUP for that part (``pippa_ops.runs.moving.move``)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1 << 12):
                pass
        if not done.is_set():
            with contextlib.suppress(OSError):
                os.killpg(os.getpgrp(), signal.SIGHUP)

    threading.Thread(target=watch, name="client-watch", daemon=True).start()


def _stdio() -> None:
    """sys.stdin/stdout/stderr over the new fds 0-2, set up as Python sets them up at start-up."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        tty = os.isatty(fd)
        buffered = open(fd, "rb" if fd == 0 else "wb", closefd=False)  # noqa: SIM115 (lives as sys.<name>)
        stream = io.TextIOWrapper(
            buffered,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=fd != 0 and (tty or fd == 2) and not old.write_through,
            write_through=old.write_through,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -c 'from pippa_ops.instant.server import main; main()' SOCKET", file=sys.stderr)
        return 2
    path = Path(args[0])
    for name in PRELOAD:  # ahead of time only: a child imports whatever is missing here itself
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if not path.parent.is_dir():  # removed since the client made it (a test's runtime dir): not ours
        return 0
    listener = wire.listen(path)
    if listener is None:
        return 0
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    me, inode = os.getpid(), os.stat(path).st_ino
    try:
        serve(listener, path, inode, wire.persist_s())
    finally:
        if os.getpid() == me:  # not in a child unwinding to its exit
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            listener.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
