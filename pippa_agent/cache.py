"""Storing a bundle the bootstrap received (pippa_agent/bootstrap.py reads what this writes): the
compiled cache ``CACHE_DIR/agent-<sha>-<cache tag>.code``, the host program ``CACHE_DIR/agent-<sha>.pyz``
(a zipapp: ``bundle.json``, the bytes the sha names, and ``__main__.py``, the bundle's
``pippa_agent/zipmain.py``), and the clean-up of versions unused for KEEP_UNUSED_S (a use touches
its .code file) except those a pin in ``CACHE_DIR/pins`` names (pippa_agent.pins): a run that has
not ended, the ``@reboot`` line, the alerts.

Runs only on a cache miss, so the bootstrap, compiled on every start, stays short."""

from __future__ import annotations

import hashlib
import json
import marshal
import os

from pippa_contract.rundir import EXIT_CODE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType
    from typing import Dict, Tuple

    Modules = Dict[str, Tuple[bool, CodeType]]

KEEP_UNUSED_S = 14 * 86400
# Modules only the host program runs (pippa_agent.program: the supervisor, the alerts): left out of the
# compiled cache, which every agent start loads and checks (tests/test_architecture.py).
PROGRAM_ONLY = (
    "pippa_agent.alerts",
    "pippa_agent.supervise",
    "pippa_agent.program",
    "pippa_agent.zipmain",
    "pippa_agent.zipapp",
    "pippa_contract.alerts",
    "pippa_contract.attempts",
)


def private(st: os.stat_result, kind: int) -> bool:
    """As the bootstrap's: owned by this user, of ``kind``, no group/other bits."""
    return st.st_uid == os.geteuid() and st.st_mode & 0o170077 == kind


def checksum(sha: str, data: bytes) -> bytes:
    """The .code file's first line, as the bootstrap checks it."""
    return hashlib.sha256(sha.encode() + data).hexdigest().encode() + b"\n"


def write_private(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def store_program(path: str, data: bytes) -> None:
    """The bundle ``data`` as the zipapp ``path``."""
    import io
    import zipfile

    main = [source for name, _, source in json.loads(data) if name == "pippa_agent.zipmain"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("__main__.py", main[0] if main else "raise SystemExit('no zipmain in the bundle')\n")
        z.writestr("bundle.json", data)
    write_private(path, buf.getvalue())


def pinned(cache_dir: str) -> set[str]:
    """The shas a pin names; a pin of a run that ended (or is gone) is removed on the way."""
    keep = set()
    pins = os.path.join(cache_dir, "pins")
    for name in os.listdir(pins) if os.path.isdir(pins) else []:
        try:
            with open(os.path.join(pins, name), "rb") as f:
                pin = json.loads(f.read())
            run_dir = pin.get("run_dir")
            if run_dir and (not os.path.isdir(run_dir) or os.path.exists(os.path.join(run_dir, EXIT_CODE))):
                os.unlink(os.path.join(pins, name))
            else:
                keep.add(str(pin["sha"]))
        except (OSError, ValueError, KeyError, AttributeError):
            pass
    return keep


def store(cache_dir: str, path: str, sha: str, modules: Modules, data: bytes) -> None:
    """Cache bundle ``sha`` (its compiled ``modules``, its JSON ``data``) in the private ``cache_dir``."""
    try:
        os.makedirs(cache_dir, 0o700, exist_ok=True)
        st = os.lstat(cache_dir)
        if st.st_uid == os.geteuid() and st.st_mode & 0o170000 == 0o40000:
            os.chmod(cache_dir, 0o700)
        if not private(os.lstat(cache_dir), 0o40000):
            return
        code = marshal.dumps({k: v for k, v in modules.items() if not k.startswith(PROGRAM_ONLY)})
        write_private(path, checksum(sha, code) + code)
        store_program(f"{cache_dir}/agent-{sha}.pyz", data)
        keep = pinned(cache_dir)
        stale = os.lstat(path).st_mtime - KEEP_UNUSED_S
        for name in os.listdir(cache_dir):
            other = os.path.join(cache_dir, name)
            old = name[:6] == "agent-" and name[6:70] not in keep and sha not in name
            if old and os.lstat(other).st_mtime < stale:
                os.unlink(other)
    except OSError:
        pass
