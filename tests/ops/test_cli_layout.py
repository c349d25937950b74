"""A thin CLI: a command module (one registered in ``cli.app.COMMANDS``) never imports another
command module, and the shared CLI helpers (options, tables) import none; only the app modules
(``cli.app``, the entry, and ``cli.typer_app``, which registers the commands) know them all. Shared
logic goes to the core, shared options and renderers to a helper, so each module is named for the
verbs it serves and can be read (and changed) on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pippa_ops.cli
from pippa_ops.cli.app import COMMANDS

CLI = Path(pippa_ops.cli.__file__).parent
APP = {"pippa_ops.cli.app", "pippa_ops.cli.typer_app"}
COMMAND_MODULES = {module for module, _help in COMMANDS.values()}


def _cli_imports(path: Path) -> set[str]:
    """The pippa_ops.cli modules ``path`` imports, anywhere in it (lazy imports in functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "pippa_ops.cli":  # from pippa_ops.cli import run_tables
                found |= {f"pippa_ops.cli.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("pippa_ops.cli.")}


MODULES = sorted(f"pippa_ops.cli.{p.stem}" for p in CLI.glob("*.py") if p.stem != "__init__")


def test_every_registered_module_exists():
    assert not COMMAND_MODULES - set(MODULES)


@pytest.mark.parametrize("module", [m for m in MODULES if m not in APP])
def test_a_cli_module_imports_no_command_module(module):
    imported = _cli_imports(CLI / f"{module.rsplit('.', 1)[1]}.py")
    assert not imported & (COMMAND_MODULES | APP), f"{module} imports {sorted(imported & COMMAND_MODULES)}"
