"""What the laptop sends a host to run: the agent bundle and the bootstrap that caches it.

The bundle is the host agent (``pippa_agent``) and the contract it shares with the laptop
(``pippa_contract``): every module's source, sorted by name, as one JSON document, so the same code
gives the same bytes and the same sha256. The bootstrap (``pippa_agent/bootstrap.py``, a file the
laptop reads and never imports) names that sha256; the host compiles the bundle once and caches the
code objects, never the sources. Nothing here imports the agent: its files are found, then read.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import re
import threading
import zlib
from pathlib import Path

PACKAGES = ("pippa_agent", "pippa_contract")
BOOTSTRAP_FILE = "bootstrap.py"  # in pippa_agent; sent as the command line, not in the bundle
_SHA_LINE = 'BUNDLE_SHA = ""'
# Imported by the agent only under TYPE_CHECKING (its handlers' request and answer types): the laptop's
# module, left out of the bundle so every agent start does not load it.
ANNOTATION_ONLY = frozenset({"pippa_contract.messages"})


def package_dir(name: str) -> Path:
    """Where a top-level package's files are (``find_spec`` locates it without running it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed next to pippa_ops")
    return Path(next(iter(spec.submodule_search_locations)))


# An import statement at the start of a line (a parenthesised name list may span lines). Parsing only
# these is ~20x faster than parsing whole modules, which cost every cold command ~25 ms.
_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t][^\n]*)", re.M
)


def _imports(source: str) -> set[str]:
    """The modules (and ``module.name`` of from-imports) that ``source``'s import statements name.

    A line of prose that looks like one adds at most a name that is not in the bundle."""
    names: set[str] = set()
    for match in _IMPORT_LINE.finditer(source):
        try:
            body = ast.parse(match.group(0).strip()).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


def files() -> list[Path]:
    """Every file the bundle and the bootstrap are made from (a warm process that built them checks
    these for changes)."""
    return sorted(path for package in PACKAGES for path in package_dir(package).rglob("*.py"))


# The bundle and the bootstrap are made once per process, one thread at a time: `pippa hosts` asks
# every host from a thread of its own, and CPython 3.11's ast.parse run in several threads at once can
# fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905), which
# failed the whole command.
_BUILD_LOCK = threading.RLock()


def modules() -> tuple[tuple[str, bool, str], ...]:
    """``(module, is_package, source)`` of every module in the bundle, sorted by name: all of
    ``pippa_agent`` and the ``pippa_contract`` modules it imports (``verbs`` is the laptop's)."""
    with _BUILD_LOCK:
        return _modules()


@functools.cache
def _modules() -> tuple[tuple[str, bool, str], ...]:
    found: dict[str, tuple[bool, str]] = {}
    for path in files():
        top = next(p for p in PACKAGES if path.is_relative_to(package_dir(p)))
        parts = [top, *path.relative_to(package_dir(top)).with_suffix("").parts]
        if parts == ["pippa_agent", BOOTSTRAP_FILE.removesuffix(".py")]:
            continue
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = (is_package, path.read_text(encoding="utf-8"))
    todo = [n for n in found if n.split(".")[0] == "pippa_agent"]
    keep = {"pippa_contract", *todo}
    while todo:
        for name in _imports(found[todo.pop()][1]):
            if name in found and name not in keep and name not in ANNOTATION_ONLY:
                keep.add(name)
                todo.append(name)
    return tuple(sorted((n, *found[n]) for n in keep))


@functools.cache
def payload() -> bytes:
    return json.dumps([list(m) for m in modules()], separators=(",", ":")).encode()


@functools.cache
def digest() -> str:
    """The bundle's sha256: part of the command line, so the host runs exactly this version."""
    return hashlib.sha256(payload()).hexdigest()


@functools.cache
def program() -> bytes:
    """The bundle, compressed (sent only when the host has not cached it)."""
    return zlib.compress(payload(), 9)


def bootstrap() -> str:
    """The bootstrap's source with this bundle's sha256 filled in."""
    with _BUILD_LOCK:
        return _bootstrap()


@functools.cache
def _bootstrap() -> str:
    text = (package_dir("pippa_agent") / BOOTSTRAP_FILE).read_text(encoding="utf-8")
    if text.count(_SHA_LINE) != 1:
        raise RuntimeError(f"pippa_agent/{BOOTSTRAP_FILE} must set {_SHA_LINE} exactly once")
    text = text.replace(_SHA_LINE, f'BUNDLE_SHA = "{digest()}"')
    return _compact(text)


def _compact(source: str) -> str:
    """The bootstrap as sent: without docstrings, comments, annotations and its ``TYPE_CHECKING``
    block (it is compiled on every start; the file keeps them for readers and mypy)."""
    tree = ast.parse(source)
    checking = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    tree.body = [n for n in tree.body if n not in checking]
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node, False):
            node.body = node.body[1:] or [ast.Pass()]
        if isinstance(node, ast.FunctionDef):
            node.returns = None
            for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                arg.annotation = None
    return ast.unparse(tree) + "\n"
