"""The one program a host's python3 is started with: ``python3 -S -I -c <this file>``.

The laptop (``pippa_ops.transport.agent_client``) fills in BUNDLE_SHA, the sha256 of the agent
bundle (``pippa_agent`` plus ``pippa_contract``), so the command line names exactly one version.
The bootstrap loads the compiled bundle from its cache (answering ``+``), or asks for it (``?``):
the laptop, which sends its first request without waiting, then sends the bundle (zlib), which is
checked against BUNDLE_SHA, compiled module by module and cached for the next time. Requests are
frames (``<n>\\n`` + n bytes) read from fd 0 without read-ahead, so the rest of stdin stays the
agent's. With the bundle cached, the agent imports what the common verbs need while no request has
arrived yet (``serve.prepare``): an agent a connection keeper starts ahead of its command is ready.

The cache, ``CACHE_DIR/agent-<sha>-<cache tag>.code``: sha256(BUNDLE_SHA + data) in hex, a newline,
then data, the marshalled ``{module: (is_package, code)}``. It is used only when the directory is a
real directory owned by the user with no group/other permission bits and the file a regular file
owned by the user with none either, and its checksum line matches; anything else is replaced
(written to a temporary name, mode 0600, then renamed), by the bundle's own ``pippa_agent.cache``, which
also stores ``CACHE_DIR/agent-<sha>.pyz``, the host program, and deletes old versions. A cache
without that file is a cache miss.

Standard library only, python3 >= 3.8, and short: it is compiled on every start.
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import Dict, Sequence, Tuple

    Modules = Dict[str, Tuple[bool, CodeType]]

BUNDLE_SHA = ""
CACHE_DIR = "~/.cache/pippa"

if sys.version_info < (3, 8):  # noqa: UP036 - the host is told what pippa needs
    sys.exit("pippa needs python3 >= 3.8 on the host, found " + sys.version.split()[0])
try:
    from _sha256 import sha256  # type: ignore[import-not-found]  # hashlib's import costs ~2 ms
except ImportError:
    from hashlib import sha256


def read_exact(n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit("pippa agent: stdin ended early")
        data += chunk
    return data


def read_frame() -> bytes:
    head = b""
    while head[-1:] != b"\n":
        head += read_exact(1)
    return read_exact(int(head))


def private(st: os.stat_result, kind: int) -> bool:
    """Owned by this user, of ``kind`` (directory or regular file), no group/other bits."""
    return st.st_uid == os.geteuid() and st.st_mode & 0o170077 == kind


def checksum(data: bytes) -> bytes:
    return sha256(BUNDLE_SHA.encode() + data).hexdigest().encode() + b"\n"  # type: ignore[no-any-return]


def load(cache_dir: str, path: str) -> Modules | None:
    try:
        if private(os.lstat(cache_dir), 0o40000):
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                if private(os.fstat(f.fileno()), 0o100000):
                    data = f.read()
                    if data[:65] == checksum(data[65:]):
                        return marshal.loads(data[65:])  # type: ignore[no-any-return]
    except (OSError, ValueError, EOFError, TypeError):
        pass
    return None


def receive() -> tuple[Modules, bytes]:
    """The bundle from the laptop: ``[[module, is_package, source], ...]`` as JSON, compiled; and the
    JSON itself."""
    import json
    import zlib

    data = zlib.decompress(read_frame())
    if sha256(data).hexdigest() != BUNDLE_SHA:
        sys.exit("pippa agent: the program does not match its sha256")
    modules: Modules = {}
    for name, package, source in json.loads(data):
        filename = name.replace(".", "/") + ("/__init__.py" if package else ".py")
        modules[name] = (package, compile(source, filename, "exec", dont_inherit=True))
    return modules, data


class Bundle:
    """A meta path finder and loader for the bundle's modules (found before anything on sys.path)."""

    def __init__(self, modules: Modules) -> None:
        self.modules = modules

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in self.modules:
            return None
        spec_type = type(sys.__spec__)  # importlib.machinery.ModuleSpec, without importing importlib
        return spec_type(name, self, is_package=self.modules[name][0])  # type: ignore[arg-type]

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.modules[module.__name__][1], module.__dict__)


def main() -> None:
    cache_dir = os.path.expanduser(CACHE_DIR)
    path = f"{cache_dir}/agent-{BUNDLE_SHA}-{sys.implementation.cache_tag}.code"
    modules = load(cache_dir, path) if os.path.exists(f"{cache_dir}/agent-{BUNDLE_SHA}.pyz") else None
    if modules is None:
        os.write(1, b"?")
        first = read_frame()  # the laptop sends its first request, then the bundle
        modules, data = receive()
        sys.meta_path.insert(0, Bundle(modules))
        from pippa_agent.cache import store

        store(cache_dir, path, BUNDLE_SHA, modules, data)
    else:
        os.write(1, b"+")
        try:  # noqa: SIM105 - contextlib would cost every start an import
            os.utime(path)
        except OSError:
            pass
        sys.meta_path.insert(0, Bundle(modules))
        from pippa_agent.serve import prepare

        prepare()  # while no request has come (an agent started ahead of its command)
        first = read_frame()
    from pippa_agent.serve import serve

    serve(first)


if __name__ == "__main__":
    main()
