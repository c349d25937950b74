"""``pippa ssh`` and ``pippa forward``: a shell (or one command) on a host, and local port forwards.

``ssh`` execs OpenSSH with ``hosts.connect.ssh_argv``, the same endpoint, known_hosts (strict) and
identity as every pippa verb, because only a real ssh client gives a real interactive terminal.
``forward`` uses pippa's own asyncssh connection (``transport.forward``) and holds it until Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Annotated

import typer

from pippa_ops.cli.common import HostArg


def remote_line(command: list[str]) -> str:
    """One argument is a shell line (like ``run --cmd``); several are words, each quoted exactly."""
    from pippa_ops.transport.shell import join

    return command[0] if len(command) == 1 else join(command)


def ssh_cmd(
    host: HostArg,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="After --: a command to run instead of a shell (one word: a shell line).", show_default=False
        ),
    ] = None,
    tty: Annotated[
        bool, typer.Option("--tty", "-t", help="Give the command a terminal (a shell always has one).")
    ] = False,
) -> None:
    """A shell (or one command, after --) on the host, with pippa's host resolution, keys and identity."""
    from pippa_ops.hosts.connect import resolve, ssh_argv

    spec = resolve(host)
    words = list(command or [])
    if spec.is_local:
        shell = os.environ.get("SHELL") or "/bin/sh"
        argv = [shell, "-c", remote_line(words)] if words else [shell, "-l"]
    else:
        argv = ssh_argv(spec, tty=tty or not words)
        if words:
            argv.append(remote_line(words))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        from pippa_ops.errors import ToolMissing

        raise ToolMissing(f"cannot run {argv[0]}: {e.strerror or e} (install OpenSSH's client)") from e


def forward_cmd(
    host: HostArg,
    ports: Annotated[
        list[str],
        typer.Argument(
            help="PORT (same port here) or PORT:LOCALPORT (the host's port first; LOCALPORT 0: any free).",
            show_default=False,
        ),
    ],
) -> None:
    """Forward local ports to ports on the host (TensorBoard, a vLLM server) until Ctrl-C."""
    from pippa_ops.errors import UsageError
    from pippa_ops.hosts.connect import direct_transport, resolve
    from pippa_ops.transport.forward import LISTEN, Forwarder, parse_port_spec

    specs = [parse_port_spec(p) for p in ports]
    spec = resolve(host)
    if spec.is_local:
        raise UsageError("the host 'local' is this machine: connect to its ports directly")
    # Forwards open direct-tcpip channels of their own: a connection of this process, not the
    # connection keeper's (which relays commands only).
    transport = direct_transport(spec)

    def log(message: str) -> None:
        typer.echo(f"pippa: {message}", err=True)

    fwd = Forwarder(transport, specs, log)
    try:
        fwd.start()
        for local, remote in fwd.bound():
            print(f"forwarding {LISTEN}:{local} -> {spec.name}:localhost:{remote}", flush=True)
        print("Ctrl-C stops", flush=True)
        stop = threading.Event()
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        print("stopped forwarding", flush=True)
    finally:
        fwd.close()


def register(app: typer.Typer) -> None:
    app.command("ssh")(ssh_cmd)
    app.command("forward")(forward_cmd)
