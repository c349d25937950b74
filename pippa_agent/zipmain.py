"""``__main__.py`` of the host program ``~/.cache/pippa/agent-<sha>.pyz`` (the bootstrap writes it
there from the bundle): check that the zipapp's ``bundle.json`` is the bundle its name says, in a
directory and a file only this user can write, then run ``pippa_agent.program`` from it.

The modules are compiled when first imported, from the checked bytes; nothing is read from
``sys.path``. Standard library only, python3 >= 3.8."""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Sequence

try:
    from _sha256 import sha256  # type: ignore[import-not-found]  # hashlib's import costs ~2 ms
except ImportError:
    from hashlib import sha256


def private(path: str, kind: int) -> bool:
    st = os.stat(path)
    return st.st_uid == os.geteuid() and st.st_mode & 0o170077 == kind


def checked_bundle(archive: str, read: object) -> bytes:
    """``bundle.json``'s bytes, or exit with one line saying why they cannot be trusted."""
    real = os.path.realpath(archive)
    name = os.path.basename(real)
    if not (name.startswith("agent-") and name.endswith(".pyz")):
        sys.exit(f"pippa: {archive} is not a pippa host program (agent-<sha>.pyz)")
    if not (private(os.path.dirname(real), 0o40000) and private(real, 0o100000)):
        sys.exit(f"pippa: {real} or its directory may be written by another user: not run")
    data = read(os.path.join(archive, "bundle.json"))  # type: ignore[operator]
    if sha256(data).hexdigest() != name[len("agent-") : -len(".pyz")]:
        sys.exit(f"pippa: {real} does not match its sha256: not run")
    return data  # type: ignore[no-any-return]


class Sources:
    """A meta path finder and loader for the bundle's modules, compiled when first imported."""

    def __init__(self, data: bytes) -> None:
        self.modules: dict[str, tuple[bool, str]] = {n: (p, s) for n, p, s in json.loads(data)}

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in self.modules:
            return None
        spec_type = type(sys.__spec__)
        return spec_type(name, self, is_package=self.modules[name][0])  # type: ignore[arg-type]

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        package, source = self.modules[module.__name__]
        filename = module.__name__.replace(".", "/") + ("/__init__.py" if package else ".py")
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)


def main() -> None:
    loader = globals().get("__loader__")
    archive = getattr(loader, "archive", None)
    if not archive:
        sys.exit("pippa: run this as the host program: python3 -S -I agent-<sha>.pyz ...")
    sys.meta_path.insert(0, Sources(checked_bundle(archive, loader.get_data)))  # type: ignore[union-attr]
    from pippa_agent.program import main as program_main

    sys.exit(program_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
