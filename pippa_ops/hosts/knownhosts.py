"""What ``--accept-new`` recorded in ~/.ssh/known_hosts, said in one line per key.

The key is recorded where the connection is made (this process or the connection keeper); the
command compares the file before and after, so it can say which key went where either way.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from pippa_ops.hosts.inventory import known_hosts_path


def snapshot(path: Path | None = None) -> set[str]:
    p = path or known_hosts_path()
    try:
        return {line.strip() for line in p.read_text().splitlines() if line.strip()}
    except OSError:
        return set()


def fingerprint(key_b64: str) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a base64 public key."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def recorded_lines(host: str, before: set[str], path: Path | None = None) -> list[str]:
    """One line per key added to known_hosts since ``before``."""
    p = path or known_hosts_path()
    out = []
    for line in sorted(snapshot(p) - before):
        parts = line.split()
        if len(parts) >= 3:
            out.append(f"{host}: recorded {parts[1]} key {fingerprint(parts[2])} for {parts[0]} in {p}")
    return out
