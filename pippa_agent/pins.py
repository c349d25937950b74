"""A run's record of the host program it started with: ``RUN_DIR/agent.pyz``, a link to
``~/.cache/pippa/agent-<sha>.pyz`` (cmd.sh runs the supervisor and the alert hook through it), and a
pin in ``~/.cache/pippa/pins`` so the bootstrap's cache cleanup keeps that version while the run
has not ended."""

from __future__ import annotations

import json
import os

from pippa_agent.host import AgentError, ErrorKind, host_path, write_atomic
from pippa_contract.hostdirs import CACHE_DIR, PINS, RUN_PROGRAM, program_file
from pippa_contract.names import NAME_RE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import Empty, LinkProgramRequest

SHA_CHARS = frozenset("0123456789abcdef")


def pin(name: str, sha: str, run_dir: str | None = None) -> None:
    """Keep program ``sha`` while ``run_dir`` has no exit_code (or for good, without a run dir)."""
    pins = os.path.join(os.path.expanduser(CACHE_DIR), PINS)
    os.makedirs(pins, mode=0o700, exist_ok=True)
    write_atomic(os.path.join(pins, name), json.dumps({"sha": sha, "run_dir": run_dir}).encode(), 0o600)


def record_program(run_dir: str, sha: str) -> None:
    """Link the run to program ``sha`` (which must be on this host: the bootstrap stored it) and pin it."""
    link(os.path.join(run_dir, RUN_PROGRAM), sha)
    import hashlib  # here, not at the top: pippa_agent.runs is imported on every agent start

    real = os.path.realpath(run_dir)
    pin("run-" + hashlib.sha1(real.encode()).hexdigest()[:20], sha, real)


def link(path: str, sha: str) -> None:
    """``path`` (its directory created 0700) becomes a link to the host program ``sha``, atomically."""
    if len(sha) != 64 or not set(sha) <= SHA_CHARS:
        raise AgentError(ErrorKind.USAGE, f"invalid program sha {sha!r}")
    target = os.path.expanduser(program_file(sha))
    if not os.path.isfile(target):
        raise AgentError(ErrorKind.NOT_FOUND, f"the host program {target} is missing")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def link_program(req: LinkProgramRequest) -> Empty:
    """The verb: a stable link (the alerts', the ``@reboot`` line's) to one version, pinned as ``pin``."""
    if not NAME_RE.match(req["pin"]):
        raise AgentError(ErrorKind.USAGE, f"invalid pin name {req['pin']!r}")
    link(host_path(req["path"]), req["sha"])
    pin(req["pin"], req["sha"])
    return {}
