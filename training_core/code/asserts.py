"""MBPP-style asserts judged outside the sandbox: the program never sees the expected values.

Running ``code + asserts`` as one program lets the code read the asserts (its own source, its code
object's constants), shadow a builtin they call (``def set(...)``), return an object whose ``__eq__``
is always true, or forge "ran to the end". So each assert is split here, in the trainer:

- every sub-expression rooted in a name the assert does not get from builtins or the setup's imports
  (a call of the solution's function, ``Pair(1, 2)``, ``Solution().f(x)``) is sent to the sandbox
  as a *call*; the sandbox evaluates it after the program ran and sends back its value as plain data
  (``training_core.sandbox.values``: exact built-in types only, anything else is ``Opaque``);
- the rest of the assert (``== (4, 5)``, ``set(...) ==``, ``math.isclose``) is evaluated here, on
  those values, with the real builtins: the program can neither read nor patch it.

An assert that is not an ``assert`` statement cannot be split and fails closed.
"""

from __future__ import annotations

import ast
import builtins
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from training_core.sandbox import Opaque, SandboxResult, Status

VALUES = "__pippa_values__"


@dataclass(frozen=True)
class AssertJob:
    """One program to run (setup + code, no asserts), the calls to evaluate, the checks to judge."""

    program: str
    calls: tuple[str, ...]
    checks: tuple[CodeType, ...]  # compiled in the trainer; read VALUES[k] for the k-th call
    namespace: dict[str, Any] = field(default_factory=dict)  # builtins + the setup's imports
    valid: bool = True  # False: a test could not be split, so the job never passes


def _imports(setup: str) -> dict[str, Any]:
    """Modules the setup imports (``import math``, ``from collections import Counter``), loaded here."""
    names: dict[str, Any] = {}
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return names
    for node in tree.body:
        try:
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    names[a.asname or top] = importlib.import_module(a.name if a.asname else top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mod = importlib.import_module(node.module)
                for a in node.names:
                    if a.name != "*" and hasattr(mod, a.name):
                        names[a.asname or a.name] = getattr(mod, a.name)
        except ImportError:
            continue
    return names


class _Split(ast.NodeTransformer):
    """Replaces each program-rooted sub-expression by ``VALUES[k]`` and records its source."""

    def __init__(self, trusted: set[str]) -> None:
        self.trusted = trusted
        self.calls: list[str] = []
        self.local: set[str] = set()

    def _rooted(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id not in self.trusted and node.id not in self.local
        if isinstance(node, ast.Call):
            return self._rooted(node.func)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self._rooted(node.value)
        return False

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # names bound inside (a comprehension's target, a lambda's args) stay local to the check
            self.local |= {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            if isinstance(node, ast.Lambda):
                self.local |= {a.arg for a in node.args.args}
        if isinstance(node, ast.expr) and self._rooted(node):
            src = ast.unparse(node)
            if any(isinstance(n, ast.Name) and n.id in self.local for n in ast.walk(node)):
                raise ValueError(f"cannot split {src!r}: it uses a name bound inside the assert")
            self.calls.append(src)
            sub = ast.Subscript(ast.Name(VALUES, ast.Load()), ast.Constant(len(self.calls) - 1), ast.Load())
            return ast.copy_location(sub, node)
        return self.generic_visit(node)


def assert_job(code: str, test_list: Sequence[str], setup: str = "") -> AssertJob:
    """Split ``test_list`` into calls for the sandbox and checks for the trainer."""
    program = f"{setup}\n{code}\n" if setup.strip() else f"{code}\n"
    namespace = {"__builtins__": builtins, **_imports(setup)}
    trusted = set(dir(builtins)) | set(namespace)
    splitter = _Split(trusted)
    checks: list[CodeType] = []
    try:
        for test in test_list:
            for stmt in ast.parse(str(test)).body:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    namespace.update(_imports(ast.unparse(stmt)))
                    splitter.trusted |= set(namespace)
                    continue
                if not isinstance(stmt, ast.Assert):
                    raise ValueError(f"not an assert: {ast.unparse(stmt)!r}")
                splitter.local = set()
                expr = ast.Expression(splitter.visit(stmt.test))
                checks.append(compile(ast.fix_missing_locations(expr), "<assert>", "eval"))
    except (SyntaxError, ValueError):
        return AssertJob(program, (), (), namespace, valid=False)
    return AssertJob(program, tuple(splitter.calls), tuple(checks), namespace, valid=bool(checks))


def _opaque(v: Any) -> bool:
    """Whether an ``Opaque`` sits anywhere inside ``v`` (iterative: the depth is the program's choice)."""
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, Opaque):
            return True
        if isinstance(x, (list, tuple, set, frozenset)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
    return False


@dataclass(frozen=True)
class Verdict:
    """One completion's judgment: passed, or why not (for logs and ``mbpp_eval`` statuses)."""

    passed: bool
    reason: str = ""


def judge(job: AssertJob, result: SandboxResult | None) -> Verdict:
    """Passed when the program exited 0, every call returned plain data and every check holds.

    Never raises: whatever goes wrong while judging (a check that raises, a value too deep for a
    comparison, memory) fails this completion alone, with the reason."""
    try:
        return _judge(job, result)
    except Exception as e:  # RecursionError and MemoryError included: the values are the program's
        return Verdict(False, f"judge error: {type(e).__name__}")


def _judge(job: AssertJob, result: SandboxResult | None) -> Verdict:
    if result is None:
        return Verdict(False, "no run")
    if not job.valid:
        return Verdict(False, "tests could not be split into calls and checks")
    if result.status is not Status.OK:
        why = f" ({result.reason})" if result.reason else ""
        return Verdict(False, f"program {result.status.value}{why}")
    values = result.values
    if values is None or len(values) != len(job.calls):
        return Verdict(False, "no values came back")
    for k, v in enumerate(values):
        if _opaque(v):
            return Verdict(False, f"call {k} returned no plain value: {_first_opaque(v)}")
    namespace = {**job.namespace, VALUES: values}
    for n, check in enumerate(job.checks):
        try:
            if not eval(check, namespace):  # trusted test code on plain values, in the trainer
                return Verdict(False, f"assert {n} failed")
        except Exception as e:
            return Verdict(False, f"assert {n} raised {type(e).__name__}")
    return Verdict(True)


def _first_opaque(v: Any) -> str:
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, Opaque):
            return x.what[:120]
        if isinstance(x, (list, tuple, set, frozenset)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
    return ""


def judged(job: AssertJob, result: SandboxResult | None) -> bool:
    """``judge(...).passed``."""
    return judge(job, result).passed
