"""pippa_ops imports in one direction: no module imports itself back through others, and no subpackage
(hosts, transport, runs, ...) imports one that imports it.

Read from the source with ``ast``, so it holds for every module, not only those a test happens to
load. Only imports that run when a module loads count: those inside functions (deferred on purpose,
e.g. paramiko only for a remote host) and under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pippa_ops

ROOT = Path(pippa_ops.__file__).parent

# Module imports allowed to close a cycle between subpackages, each with why it is there: none today.
# (The `pippa up` steps moved from hosts/ to provision/, the pricing of run records to runs/.)
KNOWN_PACKAGE_CYCLE_EDGES: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["pippa_ops", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module loads: top level, in if/else and try blocks, not in a def or
    class body's methods, and not under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _load_time_imports(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _load_time_imports(node.body)


def import_graph() -> dict[str, set[str]]:
    """Module -> the pippa_ops modules it imports when it loads."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges: set[str] = set()
        for node in _load_time_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
                continue
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            for alias in node.names:  # `from pkg import mod` imports the module mod
                full = f"{base}.{alias.name}"
                if full in modules:
                    edges.add(full)
                elif base in modules:
                    edges.add(base)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _subpackage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_imports_itself_back() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import cycle between modules: {' -> '.join(cycle or [])}"


def test_no_subpackage_imports_one_that_imports_it() -> None:
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        for other in imported:
            if _subpackage(other) != _subpackage(module) and (module, other) not in KNOWN_PACKAGE_CYCLE_EDGES:
                graph.setdefault(_subpackage(module), set()).add(_subpackage(other))
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle between subpackages of pippa_ops: {' -> '.join(cycle or [])}"


def test_the_known_package_cycle_edges_are_still_there() -> None:
    """An edge that went away leaves the list, so the list stays the debt it says it is."""
    edges = {(m, o) for m, imported in import_graph().items() for o in imported}
    gone = KNOWN_PACKAGE_CYCLE_EDGES - edges
    assert not gone, f"gone, remove from KNOWN_PACKAGE_CYCLE_EDGES: {sorted(gone)}"


def test_the_graph_sees_what_python_imports() -> None:
    """The reader itself: relative and ``from pkg import module`` imports, not function-level ones."""
    graph = import_graph()
    assert "pippa_ops.transport.agent_client" in graph["pippa_ops.provision.boot"]  # from pkg import module
    assert "pippa_ops.transport.ssh" not in graph["pippa_ops.hosts.connect"]  # inside a function
    assert "pippa_ops.transport.endpoint" in graph["pippa_ops.transport.ssh"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
