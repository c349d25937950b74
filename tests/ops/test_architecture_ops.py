"""The laptop side's import rules, read from the source (ast), so a forbidden import fails here
before it fails on a host: the laptop never imports the host agent or torch; the agent and the
contract import only the standard library and each other (the contract not even the agent); the
contract's typed verbs load no SSH, CLI or TUI stack; no import cycle among module-level imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(path: Path, module: str, *, top_level_only: bool = False) -> Iterator[str]:
    """Every module ``path`` imports (relative imports resolved); ``top_level_only``: those that run
    when it is imported (not inside functions, not under ``if TYPE_CHECKING``)."""

    def walk(nodes: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in nodes:
            if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if top_level_only and isinstance(node, ast.If) and _type_checking(node):
                continue
            yield node
            for field in ("body", "orelse", "handlers", "finalbody"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from walk([c for c in children if isinstance(c, ast.stmt | ast.ExceptHandler)])  # type: ignore[misc]

    tree = ast.parse(path.read_text())
    nodes = walk(tree.body) if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".")
                pkg = pkg[: len(pkg) - node.level + (1 if path.name == "__init__.py" else 0)]
                base = ".".join([*pkg, base] if base else pkg)
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)  # `from pkg import module`


def test_the_laptop_never_imports_the_host_agent_or_torch() -> None:
    bad = {
        (name, imported)
        for name, path in modules("pippa_ops").items()
        for imported in imports(path, name)
        if imported.split(".")[0] in ("pippa_agent", "torch")
    }
    assert not bad, sorted(bad)


# ``alerts send`` runs under the host's training Python, where `pippa up` installs Apprise.
TRAINING_PYTHON_ONLY = {("pippa_agent.alerts.send", "apprise")}


def test_the_laptop_ships_no_host_program_of_its_own() -> None:
    """Host code lives in pippa_agent and reaches a host in the one bundle: no pippa_ops module reads
    another module's source (``module.__file__``) to copy it to a host, and none is the supervisor
    or the alerts program."""
    bad = set()
    for name, path in modules("pippa_ops").items():
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Attribute) and n.attr == "__file__" for n in ast.walk(tree)):
            bad.add((name, "reads a module's file"))
        if name.rsplit(".", 1)[-1] in ("supervise", "hostalerts"):
            bad.add((name, "a host program"))
    assert not bad, sorted(bad)
    assert {"pippa_agent.supervise", "pippa_agent.alerts"} <= set(modules("pippa_agent"))


def test_what_the_agent_serves_never_imports_what_only_the_host_program_runs() -> None:
    """The bootstrap's compiled cache leaves out the host program's own modules (PROGRAM_ONLY): an
    agent verb importing one would fail on the host."""
    from pippa_agent.cache import PROGRAM_ONLY

    bad = set()
    for package in ("pippa_agent", "pippa_contract"):
        for name, path in modules(package).items():
            if name.startswith(PROGRAM_ONLY) or name == "pippa_agent.bootstrap":
                continue
            bad |= {(name, i) for i in imports(path, name) if i.startswith(PROGRAM_ONLY)}
    assert not bad, sorted(bad)


def test_the_agent_and_the_contract_import_only_the_standard_library_and_each_other() -> None:
    allowed = {
        "pippa_agent": STDLIB | {"pippa_agent", "pippa_contract"},
        "pippa_contract": STDLIB | {"pippa_contract"},
    }
    bad = set()
    for package, ok in allowed.items():
        for name, path in modules(package).items():
            bad |= {(name, i) for i in imports(path, name) if i.split(".")[0] not in ok}
    assert not bad - TRAINING_PYTHON_ONLY, sorted(bad)


def test_the_typed_verbs_load_no_ssh_cli_or_tui_stack() -> None:
    """The warm fast path calls ``pippa_contract.verbs`` without paramiko, typer, rich or textual."""
    code = (
        "import sys, pippa_contract.verbs, pippa_contract.runfacts\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('paramiko', 'typer', 'rich', 'textual', 'pippa_ops', 'pippa_agent')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_no_import_cycle_among_module_level_imports() -> None:
    graph: dict[str, set[str]] = {}
    for package in ("pippa_ops", "pippa_agent", "pippa_contract"):
        known = modules(package)
        for name, path in known.items():
            graph[name] = {i for i in imports(path, name, top_level_only=True) if i in known and i != name}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node, [node])
    assert not cycles, cycles
