"""From a host name to something that runs commands there, and to an OpenSSH command line.

``open_transport`` is the one door the core uses: LocalTransport for ``local``, else the connection
keeper's KeeperTransport when reuse is on (the CLI), else SSHTransport (connecting lazily;
pippa_ops.transport.ssh, and so asyncssh, is imported only then, so commands on ``local`` never load it).
Both get the host's ``Endpoint``, resolved here once (``hosts.endpoint``): the transports know no
inventory and no ~/.ssh/config.
``ssh_argv`` builds the equivalent ``ssh`` command for what an SSH library
cannot do well: a real interactive terminal (``pippa attach``). It uses the same endpoint and the same
known_hosts with strict checking, so both paths trust exactly the same keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pippa_ops.hosts.endpoint import endpoint, target
from pippa_ops.hosts.inventory import HostSpec, known_hosts_path, resolve, ssh_config_path, ssh_dir
from pippa_ops.transport.base import LocalTransport, Transport

if TYPE_CHECKING:
    from pippa_ops.transport.ssh import SSHTransport

__all__ = ["connect", "direct_transport", "open_transport", "resolve", "ssh_argv"]


def open_transport(spec: HostSpec, *, accept_new: bool = False) -> Transport:
    """A transport for ``spec``; nothing connects until the first command. With reuse on (the CLI,
    see ``transport.keeper.client``) its commands run on the connection keeper's kept connection."""
    if spec.is_local:
        return LocalTransport(spec.name)
    from pippa_ops.transport import reuse

    if reuse.enabled():
        return reuse.keeper().transport(endpoint(spec), accept_new=accept_new)
    return direct_transport(spec, accept_new=accept_new)


def direct_transport(spec: HostSpec, *, accept_new: bool = False) -> SSHTransport:
    """An SSH connection of this process (asyncssh), never the keeper's (``pippa forward`` opens channels
    of its own on it); nothing connects until the first command."""
    from pippa_ops.transport.ssh import SSHTransport  # asyncssh: only a remote host needs it

    return SSHTransport(endpoint(spec), accept_new=accept_new)


def connect(name: str, *, accept_new: bool = False) -> tuple[HostSpec, Transport]:
    """Resolve ``name`` and open its transport (lazily)."""
    spec = resolve(name)
    return spec, open_transport(spec, accept_new=accept_new)


DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")  # OpenSSH's default keys, those that exist


def default_identities() -> list[Path]:
    return [p for p in (ssh_dir() / name for name in DEFAULT_KEYS) if p.is_file()]


def ssh_argv(spec: HostSpec, *, tty: bool = True) -> list[str]:
    """``ssh`` options and destination for ``spec`` (append the remote command, already quoted).

    Example: ``[*ssh_argv(spec), shell.join(["tmux", "attach", "-t", "training"])]``.
    """
    if spec.is_local:
        raise ValueError("the host 'local' needs no ssh")
    ep = target(spec)  # the ProxyJump chain as written: ssh -J resolves its hops itself
    argv = ["ssh"]
    if ssh_config_path().is_file():
        argv += ["-F", str(ssh_config_path())]
    argv += [
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts_path()}",
        "-p",
        str(ep.port),
    ]
    if ep.user:
        argv += ["-l", ep.user]
    # The keys pippa (asyncssh) uses: the ones resolved for the host, only those; else the default
    # ones in pippa's ~/.ssh ($HOME's), which the system ssh would look for in the passwd home instead.
    identities = list(ep.identity_files) or [str(p) for p in default_identities()]
    for identity in identities:
        argv += ["-i", identity]
    if ep.identity_files:
        argv += ["-o", "IdentitiesOnly=yes"]
    if ep.proxy_jump:
        argv += ["-J", ep.proxy_jump]
    if tty:
        argv.append("-t")
    argv += ["--", ep.hostname]
    return argv
