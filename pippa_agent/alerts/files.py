"""The alerts program's files on the host: its directory and config.json, the secrets file, and
reading a run's files.

Python >= 3.8, standard library and pippa_contract only."""

from __future__ import annotations

import json
import os
import shlex

from pippa_contract.alerts import TARGET
from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR
from pippa_contract.rundir import EXIT_CODE
from pippa_contract.secrets import SECRETS_PATH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def here(name: str) -> str:
    return os.path.join(os.path.expanduser(ALERTS_DIR), name)


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def write_json(path: str, data: object) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(json.dumps(data))
    os.replace(tmp, path)


def load_config() -> dict[str, Any]:
    cfg = read_json(here(ALERTS_CONFIG))
    return cfg if isinstance(cfg, dict) else {}


def secret_values() -> dict[str, str]:
    """Every ``KEY='value'`` line of the 0600 secrets file (written by `pippa up`), as a dict."""
    try:
        with open(os.path.expanduser(SECRETS_PATH)) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip():
            try:
                words = shlex.split(value)
            except ValueError:
                continue
            out[key.strip()] = words[0] if words else ""
    return out


def secret_target(values: dict[str, str] | None = None) -> str | None:
    """PIPPA_NOTIFY (one or more Apprise URLs) from the secrets file; None when unset or blank."""
    target = (secret_values() if values is None else values).get(TARGET)
    return target if target and target.strip() else None


def read_text(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def tail_lines(path: str, nbytes: int = 65536) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    return lines[1:-1] if size > nbytes else lines[:-1]


def first_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.readline(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def ended_since(runs_dir: str, since: float) -> list[str]:
    """The runs under ``runs_dir`` whose exit code was written after ``since`` (a run that began and
    ended between two looks of the watcher is still seen ending)."""
    out = []
    try:
        entries = list(os.scandir(runs_dir))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.is_dir() and os.stat(os.path.join(entry.path, EXIT_CODE)).st_mtime > since:
                out.append(entry.name)
        except OSError:
            continue
    return sorted(out)
