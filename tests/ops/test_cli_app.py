"""The `pippa` app: commands load lazily, --help lists every command, usage errors carry no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import PIPPA

from pippa_ops.cli.app import COMMANDS, load_commands

_PROBE = """
import json, sys
sys.argv = ["pippa", *{args!r}]
from pippa_ops.cli.app import main
try:
    main()
except SystemExit:
    pass
tops = ("textual", "paramiko", "pippa_ops", "pydantic", "invoke")
print("LOADED", json.dumps([m for m in sys.modules if m.split(".")[0] in tops]))
"""


def _loaded(*args: str) -> set[str]:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE.format(args=list(args))], capture_output=True, text=True, timeout=60
    )
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("LOADED"))
    return set(json.loads(line.removeprefix("LOADED ")))


def test_help_lists_every_command_without_importing_any_command_module():
    mods = _loaded("--help")
    assert not {m for m in mods if m.startswith("pippa_ops.cli.") and m != "pippa_ops.cli.app"}, mods
    assert not any(m.startswith(("paramiko", "textual")) for m in mods)
    out = subprocess.run(
        [PIPPA, "--help"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"}
    )
    listed = [ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("│ ") and len(ln.split()) > 2]
    assert [n for n in listed if n in COMMANDS] == list(COMMANDS)


def test_sync_loads_only_its_command_module_and_no_textual():
    mods = _loaded("sync", "--help")
    assert "pippa_ops.cli.hosts_cmd" in mods
    assert not {"pippa_ops.cli.run_cmd", "pippa_ops.cli.dash_cmd", "pippa_ops.cli.gpus_cmd"} & mods
    assert not any(m.startswith(("textual", "paramiko")) for m in mods), "help needs no SSH"


@pytest.mark.parametrize("module", sorted({m for m, _ in COMMANDS.values()}))
def test_help_table_matches_each_commands_own_docstring(module):
    for name, cmd in load_commands(module).items():
        assert name in COMMANDS and COMMANDS[name][0] == module
        assert (cmd.help or "").strip().splitlines()[0] == COMMANDS[name][1]


@pytest.mark.parametrize("args", [["nosuch"], ["sync"]])
def test_usage_errors_are_short_with_exit_2(args):
    p = subprocess.run([PIPPA, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "Error:" in p.stderr


@pytest.mark.parametrize(
    ("args", "option", "why"),
    [
        (["run", "--gap", "abc", "--cmd", "true"], "--gap", "valid number"),
        (["gpus", "local", "--interval", "x"], "--interval", "valid number"),
        (["stop", "training", "--grace", "soon"], "--grace", "valid number"),
    ],
)
def test_bad_option_values_are_one_usage_error_like_typers_own(args, option, why):
    """pippa_ops.typer_params converts plain options without pydantic: same exit 2 and message shape."""
    p = subprocess.run([PIPPA, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert f"Error: Invalid value for '{option}': Input should be a {why}" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_command_parses_its_options_without_pydantic_or_invoke():
    mods = _loaded("recipes", "--json")
    assert "pippa_ops.cli.run_cmd" in mods
    assert not {m for m in mods if m.split(".")[0] in ("pydantic", "invoke")}, mods
