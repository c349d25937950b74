"""The host's secrets file (``~/.config/pippa/secrets.env``, mode 0600): ``KEY='value'`` lines a POSIX
shell can source (job scripts do ``set -a; . FILE; set +a``). Written by `pippa up` from the local
.env through stdin, read by the agent (``wandb_sync``) for the one key it needs."""

from __future__ import annotations

import shlex

from pippa_contract.names import ENV_KEY_RE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

SECRETS_PATH = "~/.config/pippa/secrets.env"


def format_secrets(values: dict[str, str]) -> str:
    """The file's text: keys sorted, values single-quoted for sh. A key that is not a variable name
    is refused (ValueError): it would not be a shell assignment."""
    bad = sorted(k for k in values if not ENV_KEY_RE.match(k))
    if bad:
        raise ValueError(f"invalid environment variable name {bad[0]!r}")
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(values.items()))


def parse_secrets(text: str) -> dict[str, str]:
    """The file's ``KEY=value`` pairs (a line that is not one is skipped)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and ENV_KEY_RE.match(key):
            try:
                words = shlex.split(value)
            except ValueError:
                continue
            out[key] = words[0] if words else ""
    return out


def read_secret_values(path: str = SECRETS_PATH, env_keys: Iterable[str] = ()) -> dict[str, str]:
    """The host's secrets file (missing or unreadable: empty) and the environment variables
    ``env_keys`` that are set: what ``pippa_contract.alerts.redact_secrets`` takes out of text."""
    import os

    values: dict[str, str] = {k: os.environ[k] for k in env_keys if os.environ.get(k)}
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            values.update(parse_secrets(f.read()))
    except OSError:
        pass
    return values
