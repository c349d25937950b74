"""The laptop side of the host agent (``transport.agent``): start it, ask it things, read the answers.

Every agent process is started by ONE fixed command on the host, quoted once:
``python3 -S -I -c BOOTSTRAP``, where BOOTSTRAP names the sha256 of this version of the agent. No
argument of a request reaches a shell; requests are framed JSON on stdin. The host needs only
python3 >= 3.8 (``pippa up`` says so).

Start-up is most of what an operation costs on the host, so:
- the agent is cached on the host, compiled: ``~/.cache/pippa/agent-<sha256>-<python tag>.code``.
  The bootstrap uses it only when the directory is a real directory owned by the user with no
  group/other permissions, the file a regular file owned by the user with none either (so no other
  user can have written it), and the file's checksum line matches the rest. Otherwise it answers
  ``?``, receives the program on stdin, checks it against the sha256 in the command line, compiles
  it and stores it (write to a temporary name, then rename) for the next time; ``+`` means cached.
  A use touches the file; storing a version deletes those unused for KEEP_UNUSED_S;
- one ``Session`` keeps one agent process for several requests (a sync's listing then its marker,
  a launch's listing then its start): one Python start-up and one channel instead of several.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
import zlib
from pathlib import Path
from types import TracebackType
from typing import Any

from pippa_contract.errors import ErrorKind
from pippa_ops.errors import RemoteCommandFailed, ToolMissing, error_class
from pippa_ops.transport.base import Process, Transport
from pippa_ops.transport.shell import join

__all__ = ["Once", "Session", "call", "check_stream", "command", "parse_answer", "start"]

MIN_PYTHON = (3, 8)
CACHE_DIR = "~/.cache/pippa"
# Storing a new agent version deletes the cached versions unused this long (a use touches its file):
# old versions do not pile up, and laptops on another pippa version sharing the account keep theirs.
KEEP_UNUSED_S = 14 * 86400
# Reads the first request frame, then runs the cached agent or receives it (see the module
# docstring). Frames are "<n>\n" + n bytes, read from fd 0 without read-ahead, so the rest of stdin
# stays the agent's. Checksum line of a cache file: sha256(H + code) in hex, then "\n", then code.
_BOOTSTRAP = """import os,sys
if sys.version_info<%(min)r:sys.exit('pippa needs python3 >= 3.8 on the host, found '+sys.version.split()[0])
def r(n):
 b=b''
 while len(b)<n:
  c=os.read(0,n-len(b))
  if not c:sys.exit('pippa agent: stdin ended early')
  b+=c
 return b
def f():
 h=b''
 while h[-1:]!=b'\\n':h+=r(1)
 return r(int(h))
import marshal
try:from _sha256 import sha256
except ImportError:from hashlib import sha256
q=f();H='%(sha)s';u=os.geteuid();d=os.path.expanduser(%(dir)r)
p='%%s/agent-%%s-%%s.code'%%(d,H,sys.implementation.cache_tag)
def k(t,m):return t.st_uid==u and t.st_mode&0o170077==m
def s(m):return sha256(H.encode()+m).hexdigest().encode()+b'\\n'
c=None
try:
 if k(os.lstat(d),0o40000):
  with open(os.open(p,os.O_RDONLY|os.O_NOFOLLOW),'rb') as i:
   if k(os.fstat(i.fileno()),0o100000):
    b=i.read()
    if b[:65]==s(b[65:]):c=marshal.loads(b[65:])
except (OSError,ValueError,EOFError,TypeError):c=None
if c is None:
 os.write(1,b'?')
 import zlib
 b=zlib.decompress(f())
 if sha256(b).hexdigest()!=H:sys.exit('pippa agent: the program does not match its sha256')
 c=compile(b,'pippa_agent','exec')
 try:
  os.makedirs(d,0o700,exist_ok=True);t=os.lstat(d)
  if t.st_uid==u and t.st_mode&0o170000==0o40000:os.chmod(d,0o700)
  if k(os.lstat(d),0o40000):
   m=marshal.dumps(c);t='%%s.%%d'%%(p,os.getpid())
   with open(os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600),'wb') as o:o.write(s(m)+m)
   os.replace(t,p)
   for n in os.listdir(d):
    x=d+'/'+n
    if n[:6]=='agent-'and x!=p and os.lstat(x).st_mtime<os.lstat(p).st_mtime-%(keep)d:os.unlink(x)
 except OSError:pass
else:
 os.write(1,b'+')
 try:os.utime(p)
 except OSError:pass
g={'__name__':'pippa_agent'}
exec(c,g)
g['serve'](q)
"""


@functools.cache
def source() -> bytes:
    return (Path(__file__).parent / "agent.py").read_bytes()


@functools.cache
def digest() -> str:
    """The agent's sha256: part of the command line, so the host runs exactly this version."""
    return hashlib.sha256(source()).hexdigest()


@functools.cache
def program() -> bytes:
    """The agent's source, compressed (sent only when the host has not cached it)."""
    return zlib.compress(source(), 9)


@functools.cache
def bootstrap() -> str:
    return _BOOTSTRAP % {"min": MIN_PYTHON, "sha": digest(), "dir": CACHE_DIR, "keep": KEEP_UNUSED_S}


def frame(data: bytes) -> bytes:
    return f"{len(data)}\n".encode() + data


def command(transport: Transport) -> str:
    """The one shell line that starts the agent (the same for every verb)."""
    return join([transport.agent_python, "-S", "-I", "-c", bootstrap()])


def _failed(transport: Transport, status: int, stderr: str, verb: str) -> Exception:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "no output"
    if status == 127 or "pippa needs python3" in stderr:
        return ToolMissing(
            f"{transport.name}: the host needs python3 >= 3.8 on its PATH for pippa's agent: {last}"
        )
    return RemoteCommandFailed(f"{transport.name}: {verb} failed on the host (exit {status}): {last}")


def parse_answer(transport: Transport, verb: str, line: bytes) -> dict[str, Any]:
    """The agent's JSON answer; its expected failures become the matching typed errors."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise RemoteCommandFailed(f"{transport.name}: {verb}: the host agent gave no answer") from e
    if not isinstance(data, dict):
        raise RemoteCommandFailed(f"{transport.name}: {verb}: unexpected answer from the host agent")
    if "error" in data:
        kind = error_class(ErrorKind.parse(data["error"]), RemoteCommandFailed)
        raise kind(f"{transport.name}: {data.get('message', data['error'])}")
    return data


def _ended(transport: Transport, proc: Process, verb: str) -> Exception:
    """The error for an agent that ended without answering: its exit status and last stderr line."""
    with contextlib.suppress(OSError):
        proc.close_stdin()
    try:
        status = proc.wait(10)
    except TimeoutError:
        status = -1
    proc.kill()
    return _failed(transport, status, proc.stderr_text(), verb)


class Session:
    """One agent process on the host answering requests in turn, started by the first one.

    ``call`` asks a JSON verb; ``stream`` hands the process over to a verb that owns the rest of
    its stdin/stdout (the next request starts a new process). Not thread-safe: one caller at a time.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._proc: Process | None = None

    def _send(self, verb: str, args: dict[str, Any], timeout: float) -> Process:
        data = frame(json.dumps({"verb": verb, "args": args}).encode())
        proc = self._proc
        if proc is not None:
            try:
                proc.write(data)
            except OSError:
                self._proc = None
                raise _ended(self.transport, proc, verb) from None
            return proc
        proc = self.transport.start(command(self.transport))
        try:
            proc.set_deadline(time.monotonic() + timeout)
            proc.write(data)  # the first request travels while the host starts python
            status = proc.read(1)
            if status == b"?":  # not cached there yet: the program, once
                proc.write(frame(program()))
            elif status != b"+":
                raise _ended(self.transport, proc, verb)
        except OSError:
            raise _ended(self.transport, proc, verb) from None
        except BaseException:
            proc.kill()
            raise
        self._proc = proc
        return proc

    def call(self, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """One request and its JSON answer."""
        proc = self._send(verb, args, timeout)
        proc.set_deadline(time.monotonic() + timeout)
        try:
            line = proc.readline()
        except TimeoutError as e:
            self._proc = None
            proc.kill()
            raise TimeoutError(f"{self.transport.name}: {verb} timed out after {timeout}s") from e
        if not line.endswith(b"\n"):
            self._proc = None
            raise _ended(self.transport, proc, verb)
        proc.set_deadline(None)
        return parse_answer(self.transport, verb, line)

    def stream(self, verb: str, args: dict[str, Any], timeout: float = 60) -> Process:
        """Start a verb that streams (follow, read, sync_apply); the caller owns the process."""
        proc = self._send(verb, args, timeout)
        proc.set_deadline(None)
        self._proc = None
        return proc

    def close(self) -> None:
        """End the agent (idempotent): its stdin closes and it exits on its own, having answered
        everything; nothing waits the round trip for its exit status (``Process.close``)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.close_stdin()
        except OSError:
            pass
        finally:
            proc.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def call(transport: Transport, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """One request in an agent process of its own."""
    with Session(transport) as session:
        return session.call(verb, args, timeout)


class Once:
    """A caller for ``pippa_contract.verbs`` that asks each request in an agent process of its own
    (``Session`` keeps one process for several)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def call(self, verb: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        return call(self.transport, verb, args, timeout)

    def stream(self, verb: str, args: dict[str, Any], timeout: float = 60) -> Process:
        return Session(self.transport).stream(verb, args, timeout)


def start(transport: Transport, verb: str, args: dict[str, Any]) -> Process:
    """Start a streaming verb (follow, read, sync_apply); its stdin stays open for the caller."""
    return Session(transport).stream(verb, args)


def check_stream(transport: Transport, verb: str, proc: Process, status: int) -> None:
    if status != 0:
        raise _failed(transport, status, proc.stderr_text(), verb)
