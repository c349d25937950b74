"""The repo's shape, read from the sources with ``ast`` by one import-graph reader (nothing is imported,
so a rule holds for every module, not only those a test happens to load):

- the arrows between the packages: pippa_ops never imports the host agent or torch; the agent and the
  contract import only the standard library and each other; training_core never imports pippa_ops,
  textual or typer;
- no import cycle anywhere, even through function-level imports, and no pippa_ops subpackage importing
  one that imports it; pippa_ops/runs/ in sub-packages that import one way (RUNS_LAYERS);
- the tests mirror the packages: a test that calls pippa_agent lives in tests/agent/;
- no production file over 400 lines; no run-file name written as a literal outside pippa_contract;
- training_core: no module imports another's private names, one module decides the method.

Which imports run when a module loads: those at top level and in if/try/with/class bodies, not those in
a function, nor under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("pippa_ops", "pippa_agent", "pippa_contract", "training_core")
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
MAX_LINES = 400


# -- the reader ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    target: str  # the module named (relative imports resolved)
    names: tuple[str, ...]  # ``from target import names``; () for ``import target``
    line: int
    load_time: bool  # runs when the module loads (not in a function, not under TYPE_CHECKING)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(nodes: list[ast.stmt], load_time: bool) -> Iterator[tuple[ast.stmt, bool]]:
    for node in nodes:
        yield node, load_time
        inner = load_time and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from _walk(node.body, False)
            yield from _walk(node.orelse, inner)
            continue
        for field in ("body", "orelse", "finalbody"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _walk([c for c in children if isinstance(c, ast.stmt)], inner)
        for handler in getattr(node, "handlers", None) or []:
            yield from _walk(handler.body, inner)


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the four packages: dotted name -> file."""
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@functools.cache
def imports(module: str) -> tuple[Import, ...]:
    path = modules()[module]
    found = []
    for node, load_time in _walk(ast.parse(path.read_text(), str(path)).body, True):
        if isinstance(node, ast.Import):
            found += [Import(a.name, (), node.lineno, load_time) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".")
                pkg = pkg[: len(pkg) - node.level + (1 if path.name == "__init__.py" else 0)]
                base = ".".join([*pkg, base] if base else pkg)
            found.append(Import(base, tuple(a.name for a in node.names), node.lineno, load_time))
    return tuple(found)


def named(imp: Import, known: set[str]) -> set[str]:
    """The modules of ``known`` an import names: ``from pkg import mod`` names the submodule, ``from
    mod import name`` the module."""
    subs = {f"{imp.target}.{n}" for n in imp.names} & known
    return subs or ({imp.target} & known)


def graph(packages: tuple[str, ...], *, load_time_only: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (``load_time_only``: those that run when it loads)."""
    known = {m for m in modules() if m.split(".")[0] in packages}
    edges = {m: [i for i in imports(m) if i.load_time or not load_time_only] for m in known}
    return {m: {t for imp in found for t in named(imp, known)} - {m} for m, found in edges.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(g):
        if start not in state and (found := visit(start)):
            return found
    return None


def _in(package: str) -> list[str]:
    return [m for m in modules() if m.split(".")[0] == package]


def _where(module: str, imp: Import) -> str:
    return f"{modules()[module].relative_to(REPO)}:{imp.line} imports {imp.target}"


def test_the_reader_sees_what_python_imports() -> None:
    g = graph(("pippa_ops",))
    assert "pippa_ops.transport.agent_client" in g["pippa_ops.provision.boot"]  # from pkg import module
    assert "pippa_ops.transport.ssh" not in g["pippa_ops.hosts.connect"]  # inside a function
    assert "pippa_ops.transport.ssh" in graph(("pippa_ops",), load_time_only=False)["pippa_ops.hosts.connect"]
    assert "pippa_ops.transport.endpoint" in g["pippa_ops.transport.ssh"]
    assert "pippa_contract.messages" not in graph(("pippa_agent", "pippa_contract"))["pippa_agent.serve"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


# -- the arrows between the packages ------------------------------------------------------------------
def test_the_laptop_never_imports_the_host_agent_or_torch() -> None:
    forbidden = ("pippa_agent", "torch")
    bad = [_where(m, i) for m in _in("pippa_ops") for i in imports(m) if i.target.split(".")[0] in forbidden]
    assert bad == []


# ``alerts send`` runs under the host's training Python, where `pippa up` installs Apprise.
TRAINING_PYTHON_ONLY = {("pippa_agent.alerts.send", "apprise")}


def test_the_agent_and_the_contract_import_only_the_standard_library_and_each_other() -> None:
    allowed = {
        "pippa_agent": STDLIB | {"pippa_agent", "pippa_contract"},
        "pippa_contract": STDLIB | {"pippa_contract"},
    }
    bad = [
        _where(m, i)
        for package, ok in allowed.items()
        for m in _in(package)
        for i in imports(m)
        if i.target.split(".")[0] not in ok and (m, i.target.split(".")[0]) not in TRAINING_PYTHON_ONLY
    ]
    assert bad == []


def test_the_laptop_ships_no_host_program_of_its_own() -> None:
    """Host code lives in pippa_agent and reaches a host in the one bundle: no pippa_ops module reads
    another module's source (``module.__file__``) to copy it to a host, and none is the supervisor
    or the alerts program."""
    bad = set()
    for name in _in("pippa_ops"):
        tree = ast.parse(modules()[name].read_text())
        if any(isinstance(n, ast.Attribute) and n.attr == "__file__" for n in ast.walk(tree)):
            bad.add((name, "reads a module's file"))
        if name.rsplit(".", 1)[-1] in ("supervise", "hostalerts"):
            bad.add((name, "a host program"))
    assert not bad, sorted(bad)
    assert {"pippa_agent.supervise", "pippa_agent.alerts"} <= set(modules())


def test_what_the_agent_serves_never_imports_what_only_the_host_program_runs() -> None:
    """The bootstrap's compiled cache leaves out the host program's own modules (PROGRAM_ONLY): an
    agent verb importing one would fail on the host."""
    from pippa_agent.cache import PROGRAM_ONLY

    bad = set()
    for package in ("pippa_agent", "pippa_contract"):
        for name in _in(package):
            if name.startswith(PROGRAM_ONLY) or name == "pippa_agent.bootstrap":
                continue
            bad |= {(name, i.target) for i in imports(name) if i.target.startswith(PROGRAM_ONLY)}
    assert not bad, sorted(bad)


def test_training_core_never_imports_the_laptop_side_or_a_cli_or_tui_library() -> None:
    forbidden = ("pippa_ops", "textual", "typer")
    bad = [
        _where(m, i) for m in _in("training_core") for i in imports(m) if i.target.split(".")[0] in forbidden
    ]
    assert bad == []


def test_the_typed_verbs_load_no_ssh_cli_or_tui_stack() -> None:
    """The warm fast path calls ``pippa_contract.verbs`` without asyncssh, typer, rich or textual."""
    code = (
        "import sys, pippa_contract.verbs, pippa_contract.runfacts\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('asyncssh', 'typer', 'rich', 'textual', 'pippa_ops', 'pippa_agent')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def _repo_sources() -> Iterator[Path]:
    """Every .py file of the repo (packages, tests, bench, scripts), no virtual environment."""
    for path in sorted(REPO.rglob("*.py")):
        parts = path.relative_to(REPO).parts
        if not any(p.startswith(".") or p in ("node_modules", "build", "dist") for p in parts[:-1]):
            yield path


def test_one_ssh_stack_paramiko_is_imported_nowhere() -> None:
    """asyncssh is pippa's one SSH library (the keeper and a command's own connection): no .py file
    of the repo imports paramiko, at any depth, and the project does not depend on it."""
    bad = []
    for path in _repo_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "paramiko" for n in names):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == []
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = [*project["project"]["dependencies"]]
    for group in (project.get("dependency-groups") or {}).values():
        declared += [d for d in group if isinstance(d, str)]
    for extra in (project["project"].get("optional-dependencies") or {}).values():
        declared += extra
    assert not [d for d in declared if d.lower().startswith(("paramiko", "types-paramiko"))]


# -- no import cycle ----------------------------------------------------------------------------------
# pippa_ops imports allowed to close a cycle between its subpackages, each with why it is there: none
# today. (The `pippa up` steps moved from hosts/ to provision/, the pricing of run records to runs/.)
KNOWN_PACKAGE_CYCLE_EDGES: set[tuple[str, str]] = set()


def test_no_module_level_import_cycle_anywhere() -> None:
    cycle = find_cycle(graph(PACKAGES))
    assert cycle is None, f"import cycle between modules: {' -> '.join(cycle or [])}"


def test_no_import_cycle_anywhere_even_through_function_level_imports() -> None:
    """A deferred import hides a circle from Python, not from a reader. Three were cut: pippa_agent's
    program_file (now a leaf, pippa_agent/zipapp.py), the keeper's client and process and reuse (the
    transport/keeper/ package, one way; reuse owns the process's client), and the dashboard app and its
    samples screen (the screen asks for a Protocol, not the app)."""
    cycle = find_cycle(graph(PACKAGES, load_time_only=False))
    assert cycle is None, " -> ".join(cycle or [])


def _subpackage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_pippa_ops_subpackage_imports_one_that_imports_it() -> None:
    g: dict[str, set[str]] = {}
    for module, imported in graph(("pippa_ops",)).items():
        for other in imported:
            if _subpackage(other) != _subpackage(module) and (module, other) not in KNOWN_PACKAGE_CYCLE_EDGES:
                g.setdefault(_subpackage(module), set()).add(_subpackage(other))
    cycle = find_cycle(g)
    assert cycle is None, f"import cycle between subpackages of pippa_ops: {' -> '.join(cycle or [])}"


def test_the_known_package_cycle_edges_are_still_there() -> None:
    """An edge that went away leaves the list, so the list stays the debt it says it is."""
    edges = {(m, o) for m, imported in graph(("pippa_ops",)).items() for o in imported}
    gone = KNOWN_PACKAGE_CYCLE_EDGES - edges
    assert not gone, f"gone, remove from KNOWN_PACKAGE_CYCLE_EDGES: {sorted(gone)}"


# pippa_ops/runs/ in sub-packages by concern, each importing only those before it (function-level
# imports included): the records every part reads, launching, where a run is and moving it, reading.
RUNS_LAYERS = ("records", "launching", "moving", "reading")


def test_pippa_ops_runs_is_sub_packages_that_import_one_way() -> None:
    runs = {m for m in modules() if m.startswith("pippa_ops.runs.")}
    loose = sorted(m for m in runs if m.split(".")[2] not in RUNS_LAYERS)
    assert loose == [], "every module of pippa_ops.runs lives in one of RUNS_LAYERS"
    upward = [
        f"{m} -> {t}"
        for m, targets in graph(("pippa_ops",), load_time_only=False).items()
        if m in runs
        for t in targets
        if t in runs and RUNS_LAYERS.index(t.split(".")[2]) > RUNS_LAYERS.index(m.split(".")[2])
    ]
    assert sorted(upward) == []


# The tests mirror the packages (docs/development.md): a test that calls pippa_agent's functions lives in
# tests/agent/. These tests/ops files drive pippa end to end and call the agent too, each with why.
TESTS_OPS_CALLING_THE_AGENT = {
    "test_slurm.py": "its cluster tests submit the laptop's sbatch through the agent's verbs; then the CLI",
}


def test_tests_of_the_host_agent_live_in_tests_agent() -> None:
    calling = set()
    for path in sorted((REPO / "tests" / "ops").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n.split(".")[0] == "pippa_agent" for n in names):
                calling.add(path.name)
    assert calling == set(TESTS_OPS_CALLING_THE_AGENT)


# -- the size rule ------------------------------------------------------------------------------------
# Files allowed over the limit while a change splits them (none now); each leaves this list with the
# change that splits or moves it.
OVER_400_ALLOWED: set[str] = set()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_production_file_is_over_400_lines() -> None:
    long = {
        rel: n
        for path in modules().values()
        if (rel := str(path.relative_to(REPO))) not in OVER_400_ALLOWED and (n := _lines(path)) > MAX_LINES
    }
    assert long == {}


def test_the_size_allowlist_names_only_files_still_over_the_limit() -> None:
    """A file that was split leaves the list, so the list stays the debt it says it is."""
    done = sorted(r for r in OVER_400_ALLOWED if not (REPO / r).exists() or _lines(REPO / r) <= MAX_LINES)
    assert done == [], "remove from OVER_400_ALLOWED"


# -- one formatting ------------------------------------------------------------------------------------
# `ruff format --check .` runs in CI; a file keeps lines out of it (`# fmt: skip`) only while a change
# splits it, and leaves this list with that change.
FMT_SKIP_ALLOWED: set[str] = set()  # none left: every file is formatted


def _skips(path: Path) -> int:
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return sum(t.type == tokenize.COMMENT and t.string.startswith("# fmt: skip") for t in tokens)


def test_no_file_keeps_lines_out_of_the_formatter() -> None:
    files = [p for p in REPO.rglob("*.py") if not {".venv", "__snapshots__", "previous"} & set(p.parts)]
    skipping = {str(p.relative_to(REPO)) for p in files if _skips(p)}
    assert skipping - FMT_SKIP_ALLOWED == set()
    assert FMT_SKIP_ALLOWED - skipping == set(), "formatted now: remove from FMT_SKIP_ALLOWED"


# -- run files are named by pippa_contract.rundir alone -----------------------------------------------
RUN_FILE_NAMES = (
    "run.json",
    "cmd.sh",
    "output.log",
    "metrics.jsonl",
    "metrics.superseded.jsonl",
    "job.sbatch",
    "supervise.py",
    "attempts.json",
    "accelerate.yaml",
    "vllm.log",
)
# Names that are also ordinary words (a JSON key "started", a sort key): a literal counts only as a path
# part (``d / "exit_code"``, ``os.path.join(d, "exit_code")``, ``"x/exit_code"``).
RUN_FILE_WORDS = (
    "exit_code",
    "exit_code.tmp",
    "stop_requested",
    "started",
    "tmux_session",
    "slurm_job",
    "checkpoints",
    ".staging",
)
# Files allowed a run-file literal while other work moves them (none left: issue 31's moves are done).
RUN_FILE_LITERALS_ALLOWED: set[str] = set()


def run_file_literals(source: str) -> list[tuple[int, str]]:
    """String literals in ``source`` that name a run-directory file (docstrings and comments aside)."""
    tree = ast.parse(source)
    parent = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        text, up = node.value, parent.get(id(node))
        parts = [p for p in text.split("/") if p]
        if "/" in text:
            hit = any(p in RUN_FILE_NAMES or p in RUN_FILE_WORDS for p in parts)
        elif text in RUN_FILE_NAMES:
            hit = True
        else:
            call = getattr(up, "func", None)
            hit = text in RUN_FILE_WORDS and (
                (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div))
                or (isinstance(up, ast.Call) and getattr(call, "attr", getattr(call, "id", "")) == "join")
            )
        if hit:
            found.append((node.lineno, text))
    return found


def test_no_run_file_name_is_written_outside_the_contract() -> None:
    bad = [
        f"{rel}:{line} {text!r}"
        for module, path in modules().items()
        if not module.startswith("pippa_contract")
        and (rel := str(path.relative_to(REPO))) not in RUN_FILE_LITERALS_ALLOWED
        for line, text in run_file_literals(path.read_text())
    ]
    assert bad == [], "name run files through pippa_contract.rundir (RunDir, its constants)"


def test_the_run_file_rule_sees_paths_and_not_json_keys() -> None:
    source = 'a = d / "exit_code"\nb = os.path.join(d, "started")\nc = f"{d}/output.log"\nd = "run.json"\n'
    assert sorted(line for line, _ in run_file_literals(source)) == [1, 2, 3, 4]
    assert run_file_literals('x = {"exit_code": 1, "started": 2}\ny = r.get("stop_requested")\n') == []


# -- training_core ------------------------------------------------------------------------------------
def test_no_training_core_module_imports_another_modules_private_names() -> None:
    bad = [
        f"{_where(m, i)}.{name}"
        for m in _in("training_core")
        for i in imports(m)
        if i.target.startswith("training_core")
        for name in i.names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert bad == []


def test_one_module_decides_the_method() -> None:
    """Only training_core.methods maps a method name to its code: no ``cfg.method == "..."`` elsewhere."""
    bad = []
    for mod in _in("training_core"):
        if mod == "training_core.config":
            continue
        path = modules()[mod]
        for node in ast.walk(ast.parse(path.read_text())):
            left = node.left if isinstance(node, ast.Compare) else None
            if isinstance(left, ast.Attribute) and left.attr == "method":
                bad.append(f"{path.relative_to(REPO)}:{left.lineno}")
    assert bad == []


TRAINING_CORE_TOP_LEVEL_MAX = (
    10  # modules directly in training_core/, __init__.py counted; the rest in sub-packages
)


def test_training_core_top_level_holds_at_most_ten_modules() -> None:
    """The trainer's top level keeps its entry points and shared base (config, errors, recipes, launch,
    train); everything else lives in the sub-package of its concern (run/, hardware/, generation/, ...)."""
    top = sorted(p.name for p in (REPO / "training_core").glob("*.py"))
    assert len(top) <= TRAINING_CORE_TOP_LEVEL_MAX, top


def test_no_training_core_module_hands_itself_out_as_an_object() -> None:
    """A method is a class (training_core.methods.base.Method), not a module passed as its own Protocol
    through ``sys.modules[__name__]``."""
    bad = []
    for mod in _in("training_core"):
        path = modules()[mod]
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Name)
                and node.slice.id == "__name__"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "modules"
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == []
