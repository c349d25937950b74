"""The laptop side of the host agent (``pippa_ops.agent``): send it, ask it one thing, read the answer.

Every operation is ONE command on the host: a constant bootstrap (``python3 -S -c ...``, quoted once)
that reads the agent program and a JSON request from stdin. No argument of the request reaches a
shell, so nothing needs quoting; the host needs only python3 >= 3.8 (``pippa up`` says so).
"""

from __future__ import annotations

import functools
import json
import zlib
from pathlib import Path
from typing import Any

from pippa_ops.errors import RemoteCommandFailed, SessionExists, ToolMissing, UsageError
from pippa_ops.shell import join
from pippa_ops.transport import CommandResult, Process, Transport

__all__ = ["CommandResult", "call", "check_stream", "command", "parse", "request", "start"]

MIN_PYTHON = (3, 8)
# Reads "<n>\n" + n bytes (the zlib'd agent) from fd 0 without read-ahead, then runs it as __main__;
# the agent reads its request the same way, so the rest of stdin stays the verb's.
BOOTSTRAP = f"""import os,sys,zlib
if sys.version_info<{MIN_PYTHON!r}:
 sys.exit('pippa needs python3 >= 3.8 on the host, found '+sys.version.split()[0])
def f():
 h=b''
 while h[-1:]!=b'\\n':
  c=os.read(0,1)
  if not c:sys.exit('pippa agent: no program on stdin')
  h+=c
 n=int(h);b=b''
 while len(b)<n:
  c=os.read(0,n-len(b))
  if not c:sys.exit('pippa agent: program cut short')
  b+=c
 return b
exec(compile(zlib.decompress(f()),'pippa_agent','exec'))
"""
_ERRORS: dict[str, type[Exception]] = {
    "session_exists": SessionExists,
    "tool_missing": ToolMissing,
    "usage": UsageError,
}


@functools.cache
def program() -> bytes:
    """The agent's source, compressed (about a third of its size on the wire)."""
    return zlib.compress((Path(__file__).parent / "agent.py").read_bytes(), 9)


def frame(data: bytes) -> bytes:
    return f"{len(data)}\n".encode() + data


def command(transport: Transport) -> str:
    """The one shell line that starts the agent (the same for every verb)."""
    return join([transport.agent_python, "-S", "-c", BOOTSTRAP])


def request(verb: str, args: dict[str, Any]) -> bytes:
    return frame(program()) + frame(json.dumps({"verb": verb, "args": args}).encode())


def _failed(transport: Transport, status: int, stderr: str, verb: str) -> Exception:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "no output"
    if status == 127 or "pippa needs python3" in stderr:
        return ToolMissing(
            f"{transport.name}: the host needs python3 >= 3.8 on its PATH for pippa's agent: {last}"
        )
    return RemoteCommandFailed(f"{transport.name}: {verb} failed on the host (exit {status}): {last}")


def parse(transport: Transport, verb: str, result: CommandResult) -> dict[str, Any]:
    """The agent's JSON answer; its expected failures become the matching typed errors."""
    if not result.ok:
        raise _failed(transport, result.exit_status, result.stderr, verb)
    lines = result.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError) as e:
        raise RemoteCommandFailed(f"{transport.name}: {verb}: the host agent gave no answer") from e
    if not isinstance(data, dict):
        raise RemoteCommandFailed(f"{transport.name}: {verb}: unexpected answer from the host agent")
    if "error" in data:
        kind = _ERRORS.get(str(data["error"]), RemoteCommandFailed)
        raise kind(f"{transport.name}: {data.get('message', data['error'])}")
    return data


def call(transport: Transport, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """One round trip: run ``verb`` on the host and return its JSON answer."""
    result = transport.run(command(transport), input=request(verb, args), timeout=timeout)
    return parse(transport, verb, result)


def start(transport: Transport, verb: str, args: dict[str, Any]) -> Process:
    """Start a streaming verb (follow, read, sync_apply); its stdin stays open for the caller."""
    proc = transport.start(command(transport))
    try:
        proc.write(request(verb, args))
    except BaseException:
        proc.kill()
        raise
    return proc


def check_stream(transport: Transport, verb: str, proc: Process, status: int) -> None:
    if status != 0:
        raise _failed(transport, status, proc.stderr_text(), verb)
