"""A memory-resident copy of what the sandbox's interpreter and the common tools read from /usr.

Every sandbox sees the host's read-only ``/usr``, and its page cache is state all of them share: a
program loads a page by reading it, and another can tell a cached page from an uncached one by how
long a read takes or by which neighbours a page fault maps (fault-around, seen in
``/proc/self/pagemap``): no syscall the filter could deny. A file on tmpfs has no such state: its
pages are the file, always resident. So the code game's sandboxes get, as their ``/usr``, a copy on
tmpfs of exactly what the interpreter needs (the binary, its standard library without tests, the
shared libraries it and its extension modules link), made once per trainer process (some 60 MB,
well under a second) and bound read-only (no atime either). Nothing a run does to it is visible to
another. Every code reward's sandbox uses it (``pool.default_pool``). A program may start the shell
and the common tools (``TOOLS``: POSIX sh, coreutils, grep, sed, awk, find, diff, the interpreter as
``python3``), copied with their libraries; any other binary of the host's ``/usr`` is absent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

SKIP = {
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "dist-packages",
}  # and config-* (the static libpython): nothing a program imports
# what a program may start: the shell, the POSIX utilities and coreutils, under /usr/bin (a name missing
# on the host is skipped; a link out of /usr, e.g. awk through /etc/alternatives, is followed while copying)
TOOLS = (
    "sh",
    "dash",
    "bash",
    "env",
    "cat",
    "echo",
    "printf",
    "true",
    "false",
    "test",
    "[",
    "ls",
    "cp",
    "mv",
    "rm",
    "ln",
    "mkdir",
    "rmdir",
    "touch",
    "chmod",
    "stat",
    "head",
    "tail",
    "wc",
    "sort",
    "uniq",
    "cut",
    "paste",
    "tr",
    "tee",
    "seq",
    "expr",
    "basename",
    "dirname",
    "pwd",
    "realpath",
    "readlink",
    "sleep",
    "date",
    "id",
    "whoami",
    "uname",
    "od",
    "md5sum",
    "sha256sum",
    "base64",
    "yes",
    "nproc",
    "timeout",
    "grep",
    "egrep",
    "fgrep",
    "sed",
    "awk",
    "mawk",
    "gawk",
    "find",
    "xargs",
    "diff",
    "cmp",
    "python3",
)
_PATHS = (
    "import json, sysconfig\np = sysconfig.get_paths()\n"
    "print(json.dumps([p['stdlib'], p['platstdlib'], sysconfig.get_config_var('DESTSHARED') or '']))"
)


def _under_usr(path: str) -> str | None:
    """``path`` as it lies under /usr (``/lib/x`` is ``/usr/lib/x`` on a merged-/usr system), or None."""
    real_dir = os.path.realpath(os.path.dirname(path))
    full = os.path.join(real_dir, os.path.basename(path))
    return full if full.startswith("/usr/") else None


def _libraries(objects: list[str]) -> set[str]:
    """Every shared library ``objects`` load (ldd), as the paths the loader opens."""
    found: set[str] = set()
    for i in range(0, len(objects), 64):
        out = subprocess.run(["ldd", *objects[i : i + 64]], capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else (parts[0] if parts else "")
            if path.startswith("/") and not path.endswith(":"):  # "file:" heads each file's list
                found.add(path)
    return found


def _copy_chain(path: str, dest: Path, resolve: bool = False) -> None:
    """Copy ``path`` (under /usr) to ``dest`` mirrored, keeping a symlink a symlink and copying its target;
    ``resolve``: a link that leaves /usr (``/etc/alternatives``) becomes a copy of the file it ends at."""
    for _ in range(8):
        rel = os.path.relpath(path, "/usr")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(path):
            link = os.readlink(path)
            nxt = _under_usr(os.path.join(os.path.dirname(path), link))
            if nxt is None:
                real = os.path.realpath(path)
                if resolve and os.path.isfile(real) and not os.path.lexists(target):
                    shutil.copy2(real, target)
                elif not os.path.lexists(target):
                    os.symlink(link, target)
                return
            if not target.is_symlink():
                os.symlink(link, target)
            path = nxt
            continue
        if not target.exists():
            shutil.copy2(path, target)
        return


class UsrCopy:
    """The copy's directory (bound as the sandbox's /usr); removed at exit."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def create(cls, python: str, base: Path = Path("/dev/shm")) -> UsrCopy | str:
        """A copy for ``python`` (a /usr interpreter), or one line saying why there is none."""
        if not python.startswith("/usr/"):
            return f"the sandbox's python {python} is not under /usr"
        with contextlib.suppress(OSError), open("/proc/mounts") as f:
            fs = {line.split()[1]: line.split()[2] for line in f}
            if fs.get(str(base)) != "tmpfs":
                return f"{base} is not a tmpfs"
        if shutil.which("ldd") is None:
            return "no ldd to find the interpreter's libraries"
        for owner in base.glob(".pippa-usr-*.pid"):  # left by a trainer that was killed
            with contextlib.suppress(OSError, ValueError):
                if not Path(f"/proc/{int(owner.read_text())}").exists():
                    shutil.rmtree(base / owner.name[1:-4], ignore_errors=True)
                    owner.unlink()
        # the name is random and the owner's pid lies beside it: a sandbox sees the name (mountinfo's
        # root of /usr), so it must name no process of the host
        name = f"pippa-usr-{secrets.token_hex(8)}"
        root, owner = base / name, base / f".{name}.pid"
        try:
            owner.write_text(str(os.getpid()))
            atexit.register(owner.unlink, True)
            out = subprocess.run(
                [python, "-I", "-S", "-c", _PATHS], capture_output=True, text=True, timeout=60, check=True
            ).stdout
            stdlib, platstdlib, dynload = json.loads(out)
            root.mkdir(mode=0o755)
            atexit.register(shutil.rmtree, root, True)
            objects = [python]
            for lib in dict.fromkeys((stdlib, platstdlib)):
                real = os.path.realpath(lib)
                if not real.startswith("/usr/"):
                    raise ValueError(f"the standard library {real} is not under /usr")
                shutil.copytree(
                    real,
                    root / os.path.relpath(real, "/usr"),
                    symlinks=True,
                    dirs_exist_ok=True,
                    ignore=lambda _d, names: [n for n in names if n in SKIP or n.startswith("config-")],
                )
            if dynload and os.path.isdir(dynload):
                objects += [str(p) for p in Path(dynload).glob("*.so")]
            tools = [os.path.realpath(t) for t in (f"/usr/bin/{n}" for n in TOOLS) if os.path.exists(t)]
            for path in [python, *_libraries([*objects, *tools])]:
                usr = _under_usr(path)
                if usr is None:
                    raise ValueError(f"{path}, which the interpreter loads, is not under /usr")
                _copy_chain(usr, root)
            for name in TOOLS:
                if os.path.lexists(f"/usr/bin/{name}"):
                    _copy_chain(f"/usr/bin/{name}", root, resolve=True)
            for top, _dirs, _files in os.walk(root):  # readable by a sandbox's own uid
                os.chmod(top, 0o755)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            shutil.rmtree(root, ignore_errors=True)
            return f"could not copy the interpreter's files to {base} ({type(e).__name__}: {e})"
        return cls(root)
