"""The host-key policy of every SSH connection (``sshconn``: the keeper's and a command's own):
~/.ssh/known_hosts decides, like OpenSSH with ``StrictHostKeyChecking=yes``.

- the key offered is one known_hosts has for the name: accepted;
- the name is in known_hosts with other keys: refused, always (``HostKeyChanged``), ``accept_new`` or not;
- the name is not there: refused with the key's SHA256 fingerprint (``HostKeyUnknown``), or with
  ``accept_new`` recorded and accepted (OpenSSH's ``accept-new``).

The name is the one OpenSSH files keys under (``Endpoint.known_hosts_name``: ``host`` on port 22, else
``[host]:port``, matched exactly as OpenSSH does, with no fall back to the name without a port);
hashed entries (``HashKnownHosts``) match too: asyncssh's ``import_known_hosts`` reads the file.
"""

from __future__ import annotations

import base64
import os
import threading
from dataclasses import dataclass

import asyncssh

from pippa_ops.errors import HostKeyChanged, HostKeyUnknown, UsageError
from pippa_ops.transport.sshconfig import known_hosts_path

_known_hosts_lock = threading.Lock()

# The host-key algorithms asked for, in order, when known_hosts has no key for the host (OpenSSH's and
# order, without certificates: pippa trusts no host CA).
PREFERRED = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "rsa-sha2-256",
)
_RSA = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")  # the algorithms of a key filed as ``ssh-rsa``


@dataclass(frozen=True)
class Offered:
    """The key a host offered: its type (``ssh-ed25519``), its public blob, its SHA256 fingerprint."""

    key_type: str
    blob: bytes
    fingerprint: str


def check(host: str, known_name: str, key: Offered, *, accept_new: bool) -> None:
    """Accept ``key`` for ``known_name`` or raise; ``host`` is the name the user gave (for messages)."""
    with _known_hosts_lock:
        keys = _known(known_name)
        if keys is None:
            if not accept_new:
                raise HostKeyUnknown(
                    f"{host}: host key not in ~/.ssh/known_hosts ({known_name} {key.key_type} "
                    f"{key.fingerprint}); check it, then `pippa up {host} --accept-new` records it"
                )
            _record(known_name, key)
            return
        if any(k.public_data == key.blob for k in keys):
            return
        expected = next((k for k in keys if k.get_algorithm() == key.key_type), keys[0])
    raise HostKeyChanged(
        f"{host}: HOST KEY CHANGED for {known_name}: it now offers {key.key_type} {key.fingerprint}, "
        f"known_hosts has {expected.get_fingerprint()}; refusing to connect (possible man-in-the-middle). "
        f"If the host was reinstalled, remove the old key: ssh-keygen -R '{known_name}'"
    )


def algorithms(known_name: str) -> list[str]:
    """The host-key algorithms to ask for: those of the keys known_hosts has for ``known_name`` first,
    as OpenSSH orders them. A host offers several keys (ed25519, ECDSA, RSA) and shows the first one
    the client asks for; known_hosts often holds one. Asked in a fixed order, a host known by its
    ECDSA key would show its ed25519 key and be refused as changed."""
    with _known_hosts_lock:
        keys = _known(known_name)
    known: list[str] = []
    for key_type in dict.fromkeys(k.get_algorithm() for k in keys or ()):
        for alg in _RSA if key_type == "ssh-rsa" else (key_type,):
            if alg not in known:
                known.append(alg)
    return known + [a for a in PREFERRED if a not in known]


def _known(known_name: str) -> list[asyncssh.SSHKey] | None:
    """The keys known_hosts files under ``known_name`` (None: the name is not there). The name is
    given whole (``[host]:port`` included) and with no port, so that it is matched as written."""
    path = known_hosts_path()
    if not path.is_file():
        return None
    try:
        known = asyncssh.import_known_hosts(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from e
    keys = list(known.match(known_name, "", None)[0])
    return keys or None


def _record(known_name: str, key: Offered) -> None:
    """Append ``known_name keytype base64`` to ~/.ssh/known_hosts (created 0600 in a 0700 ~/.ssh)."""
    path = known_hosts_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = path.read_text() if path.exists() else ""
    line = f"{known_name} {key.key_type} {base64.b64encode(key.blob).decode()}\n"
    with open(path, "a", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
        if existing and not existing.endswith("\n"):
            fh.write("\n")
        fh.write(line)
