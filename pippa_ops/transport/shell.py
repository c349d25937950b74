"""Everything that reaches a shell goes through here: strict name patterns and one quoting step.

Command lines are built from argument lists by small pure functions and quoted once with
``shlex.join``, so they can be unit-tested without SSH. Names (session, run, recipe, host alias)
are validated against a strict pattern: ``x; touch /tmp/pwned`` is refused, never quoted and run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from pippa_contract.names import ENV_KEY_RE
from pippa_contract.names import NAME_RE as NAME_RE
from pippa_contract.names import SESSION_RE as SESSION_RE
from pippa_ops.errors import InvalidName


def validate_name(kind: str, value: str, pattern: re.Pattern[str] = NAME_RE) -> str:
    """Return ``value`` when it matches ``pattern``; otherwise raise InvalidName naming ``kind``."""
    if not pattern.fullmatch(value):
        raise InvalidName(
            f"invalid {kind} name {value!r}: use letters, digits, '_' or '-' (at most 64 characters)"
        )
    return value


def validate_session(name: str) -> str:
    return validate_name("session", name, SESSION_RE)


def validate_env_key(key: str) -> str:
    if not ENV_KEY_RE.fullmatch(key):
        raise InvalidName(f"invalid environment variable name {key!r}")
    return key


def join(argv: Sequence[str]) -> str:
    """Quote an argument list once, for a POSIX shell."""
    return shlex.join(list(argv))


def sh_path(path: str) -> str:
    """One shell word for a host path: quoted, with a leading ``~`` left to the host's ``$HOME``
    (so no round trip is needed to learn it)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(path)


def export_line(env: dict[str, str]) -> str:
    """``export K=V ...`` with validated keys and quoted values (for non-secret variables only)."""
    if not env:
        return ":"
    return "export " + " ".join(f"{validate_env_key(k)}={shlex.quote(v)}" for k, v in sorted(env.items()))
