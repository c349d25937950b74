"""The host's secrets file (``~/.config/pippa/secrets.env``, mode 0600): ``KEY='value'`` lines a POSIX
shell can source (job scripts do ``set -a; . FILE; set +a``). Written by `pippa up` from the local
.env through stdin, read by the agent (``wandb_sync``) for the one key it needs. The one redaction
(``redact_secrets``) lives here too: the alerts take secrets out of messages with it, the agent out of
reason lines."""

from __future__ import annotations

import re
import shlex

from pippa_contract.names import ENV_KEY_RE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

SECRETS_PATH = "~/.config/pippa/secrets.env"
TARGET = "PIPPA_NOTIFY"  # the secrets file's key holding the Apprise URLs
HEARTBEAT = "PIPPA_HEARTBEAT"  # the dead-man's switch's ping URL (pippa_agent.alerts.heartbeat)
_ADDRESS = re.compile(r"[0-9.]{1,15}")  # an IPv4 address or a port: parts of a URL that are no secret


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


def load_secrets() -> dict[str, str]:
    """The host's secrets file as a dict ({} when there is none): what the agent redacts from the
    reason lines it reports (``runfacts.redact_run``) and the alerts redact from messages."""
    import os

    try:
        with open(os.path.expanduser(SECRETS_PATH)) as f:
            return parse_secrets(f.read())
    except OSError:
        return {}


def redact(text: str, target: str) -> str:
    """Take every part of the Apprise URLs out of a line (tokens live in hosts, paths and queries).

    Bare addresses and ports (digits and dots, IPv4 length at most) stay: they are no secret, and
    taking them out would mangle the steps, times and costs a message carries."""
    for url in sorted(re.split(r"[\s,]+", target), key=len, reverse=True):
        if url:
            text = text.replace(url, "***")
    for part in sorted(set(re.split(r"[^A-Za-z0-9_.~%+-]+", target)), key=len, reverse=True):
        if len(part) >= 4 and part not in ("json", "form", "http", "https") and not _ADDRESS.fullmatch(part):
            text = text.replace(part, "***")
    return text


def redact_secrets(text: str, values: dict[str, str]) -> str:
    """``text`` without PIPPA_NOTIFY's URLs and their parts (``redact``) or any other secret's value."""
    for key, value in sorted(values.items(), key=lambda kv: len(kv[1]), reverse=True):
        if key == TARGET:
            text = redact(text, value)
        elif len(value.strip()) >= 4:
            text = text.replace(value, "***")
    return text
