"""From a host name to something that runs commands there, and to an OpenSSH command line.

``open_transport`` is the one door the core uses: LocalTransport for ``local``, SSHTransport
otherwise (connecting lazily). ``ssh_argv`` builds the equivalent ``ssh`` command for what paramiko
cannot do well: a real interactive terminal (``pippa attach``). It uses the same endpoint and the same
known_hosts with strict checking, so both paths trust exactly the same keys.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def _import_paramiko_without_invoke() -> None:
    """Import paramiko with ``invoke`` held back when ~/.ssh/config has no ``Match exec`` line.

    paramiko.config imports invoke (which pulls in asyncio, unittest.mock and a YAML parser: 50-90 ms,
    a quarter of a no-change ``pippa sync``'s imports) only to run ``Match exec`` commands. Without
    such a line it is never called; with one, invoke is imported as usual. Later imports of invoke
    elsewhere are unaffected (the block is lifted right after paramiko is in).
    """
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    try:
        config = (Path.home() / ".ssh" / "config").read_text(errors="replace")
    except OSError:
        config = ""
    if re.search(r"(?im)^\s*match\b.*\bexec\b", config):
        return
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes `import invoke` fail fast
    try:
        import paramiko  # noqa: F401
    finally:
        if sys.modules.get("invoke", 0) is None:
            del sys.modules["invoke"]


_import_paramiko_without_invoke()

from pippa_ops.inventory import HostSpec, known_hosts_path, resolve, ssh_config_path  # noqa: E402
from pippa_ops.ssh import SSHTransport, endpoint  # noqa: E402
from pippa_ops.transport import LocalTransport, Transport  # noqa: E402

__all__ = ["connect", "open_transport", "resolve", "ssh_argv"]


def open_transport(spec: HostSpec, *, accept_new: bool = False) -> Transport:
    """A transport for ``spec``; nothing connects until the first command."""
    if spec.is_local:
        return LocalTransport(spec.name)
    return SSHTransport(spec, accept_new=accept_new)


def connect(name: str, *, accept_new: bool = False) -> tuple[HostSpec, Transport]:
    """Resolve ``name`` and open its transport (lazily)."""
    spec = resolve(name)
    return spec, open_transport(spec, accept_new=accept_new)


def ssh_argv(spec: HostSpec, *, tty: bool = True) -> list[str]:
    """``ssh`` options and destination for ``spec`` (append the remote command, already quoted).

    Example: ``[*ssh_argv(spec), shell.join(["tmux", "attach", "-t", "training"])]``.
    """
    if spec.is_local:
        raise ValueError("the host 'local' needs no ssh")
    ep = endpoint(spec)
    argv = ["ssh"]
    if ssh_config_path().is_file():
        argv += ["-F", str(ssh_config_path())]
    argv += [
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts_path()}",
        "-p", str(ep.port),
    ]  # fmt: skip
    if ep.user:
        argv += ["-l", ep.user]
    for identity in ep.identity_files:
        argv += ["-i", identity]
    if ep.proxy_jump:
        argv += ["-J", ep.proxy_jump]
    if tty:
        argv.append("-t")
    argv += ["--", ep.hostname]
    return argv
