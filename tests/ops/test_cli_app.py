"""The `pippa` app: commands load lazily, --help lists every command, usage errors carry no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import PIPPA
from projects import make_project

from pippa_ops.cli.app import COMMANDS
from pippa_ops.cli.typer_app import load_commands

_PROBE = """
import json, sys
sys.argv = ["pippa", *{args!r}]
from pippa_ops.cli.app import main
try:
    main()
except SystemExit:
    pass
tops = ("textual", "asyncssh", "pippa_ops", "pydantic")
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
    app = {"pippa_ops.cli.app", "pippa_ops.cli.typer_app"}
    assert not {m for m in mods if m.startswith("pippa_ops.cli.")} - app, mods
    assert not any(m.startswith(("asyncssh", "textual")) for m in mods)
    out = subprocess.run(
        [PIPPA, "--help"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"}
    )
    commands = out.stdout.split("Commands:", 1)[1]
    # a command's name stands at column 2; a summary's wrapped lines are indented further
    listed = [ln.split()[0] for ln in commands.splitlines() if ln.startswith("  ") and ln[2:3].strip()]
    assert [n for n in listed if n in COMMANDS] == list(COMMANDS)


def test_sync_loads_only_its_command_module_and_no_textual():
    mods = _loaded("sync", "--help")
    assert "pippa_ops.cli.hosts_cmd" in mods
    assert not {"pippa_ops.cli.run_cmd", "pippa_ops.cli.dash_cmd", "pippa_ops.cli.gpus_cmd"} & mods
    assert not any(m.startswith(("textual", "asyncssh")) for m in mods), "help needs no SSH"


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
        (["run", "--gap", "abc", "--cmd", "true"], "--gap", "'abc' is not a valid float"),
        (["gpus", "local", "--interval", "x"], "--interval", "'x' is not a valid float"),
        (["stop", "training", "--grace", "soon"], "--grace", "'soon' is not a valid float"),
    ],
)
def test_bad_option_values_are_one_usage_error_like_typers_own(args, option, why):
    """typer's own conversion: exit 2 and one usage line naming the option."""
    p = subprocess.run([PIPPA, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert f"Error: Invalid value for '{option}': {why}" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("flags", "named"), [(["--gpus", "3"], "--gpus"), (["--set", "a=1"], "--set")])
def test_a_recipe_option_with_cmd_is_refused_naming_the_option_given(tmp_path, flags, named):
    """`--gpus 3 --cmd ...` names --gpus (it once blamed a --set nobody gave); nothing starts."""
    p = subprocess.run(
        [PIPPA, "run", "--host", "local", "--cmd", "true", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"{named} applies to recipes, not to --cmd" in p.stderr, p.stderr
    assert named == "--set" or "--set" not in p.stderr


def test_ps_of_a_host_whose_entry_is_invalid_is_one_line_not_unreachable(tmp_path):
    (tmp_path / ".config" / "pippa").mkdir(parents=True)
    (tmp_path / ".config" / "pippa" / "hosts.toml").write_text('[hosts.bad]\naddress = "x"\nport = "abc"\n')
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    p = subprocess.run(
        [PIPPA, "ps", "--host", "bad"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert p.returncode == 2 and "unreachable" not in p.stdout + p.stderr, p.stdout + p.stderr
    said = (p.stdout + p.stderr).strip().splitlines()
    where = tmp_path / ".config" / "pippa" / "hosts.toml"
    assert said == [f"pippa: {where}: hosts.bad.port must be a port number"]


def test_gpus_on_a_host_without_gpus_names_it_once_and_json_errors_are_json(tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"  # a GPU box whose driver is gone
    smi.parent.mkdir()
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the driver."
    smi.write_text(f'#!/bin/sh\necho "{failed}"\nexit 9\n')
    smi.chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "COLUMNS": "200",
        "PATH": f"{smi.parent}:{os.environ['PATH']}",
    }
    said = f"local: no NVIDIA GPU ({failed})"

    def gpus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PIPPA, "gpus", *args], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
        )

    both = gpus("local", "nosuchhost")  # two hosts: asked in parallel, each named once
    assert both.stdout.strip() == said, both.stdout
    one = gpus("local", "--json")
    assert one.returncode == 7, one.stderr
    assert json.loads(one.stdout) == {"host": "local", "gpus": [], "unavailable": said}
    bad = gpus("nosuchhost", "--json")
    doc = json.loads(bad.stdout)
    assert bad.returncode == 3 and doc["host"] == "nosuchhost" and doc["exit_code"] == 3
    assert doc["error"].startswith("unknown host 'nosuchhost'")


def test_recipe_and_host_names_complete_and_a_mistyped_status_is_pointed_at_ps(tmp_path):
    (tmp_path / ".config" / "pippa").mkdir(parents=True)
    (tmp_path / ".config" / "pippa" / "hosts.toml").write_text('[hosts.h100-a]\naddress = "203.0.113.10"\n')
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "_PIPPA_COMPLETE": "complete_bash",
    }

    def complete(*words: str) -> list[str]:
        line = {"COMP_WORDS": " ".join(["pippa", *words]), "COMP_CWORD": str(len(words))}
        p = subprocess.run([PIPPA], env={**env, **line}, capture_output=True, text=True, timeout=60)
        return p.stdout.split()

    assert "tiny" in complete("run", "ti") and "overfit" not in complete("run", "ti")
    assert complete("ps", "--host", "h1") == ["h100-a"] and complete("gpus", "lo") == ["local"]
    assert complete("run", "--host", "") == ["local", "h100-a"]
    p = subprocess.run([PIPPA, "stauts"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Did you mean 'status'? That is `pippa ps`." in p.stderr, p.stderr
    p = subprocess.run([PIPPA, "status"], capture_output=True, text=True, timeout=60)  # not "status?"
    assert p.returncode == 2, p.stderr
    assert "No such command 'status'. pippa's status is `pippa ps`." in p.stderr, p.stderr
    assert "Did you mean" not in p.stderr


def test_a_command_loads_no_ssh_or_tui_it_does_not_need():
    """pydantic too: typer 0.29 coerces every parameter through it, +0.3 s on every command."""
    mods = _loaded("recipes", "--json")
    assert "pippa_ops.cli.run_cmd" in mods
    assert not {m for m in mods if m.split(".")[0] in ("asyncssh", "textual", "pydantic")}, mods


def test_help_marks_no_flag_as_bool_and_names_arguments_in_the_usage_line():
    run = subprocess.run([PIPPA, "run", "--help"], capture_output=True, text=True, timeout=60)
    logs = subprocess.run([PIPPA, "logs", "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and logs.returncode == 0
    assert "<bool>" not in run.stdout and "--replace " in run.stdout
    assert "Usage: pippa run [OPTIONS] [RECIPES]..." in run.stdout
    assert "Usage: pippa logs [OPTIONS] [NAME]" in logs.stdout and "{name}" not in logs.stdout


def test_a_whole_number_written_with_a_decimal_point_is_accepted_for_an_int_option(tmp_path):
    empty = tmp_path / "team.toml"
    empty.write_text("")
    env = {**os.environ, "PIPPA_INVENTORY": str(empty)}
    argv = [PIPPA, "dash", "--interval", "2.0"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "no hosts in the inventory" in p.stderr, p.stderr  # 2.0 was taken as 2


def test_typer_private_slots_are_not_filled_in():
    import pathlib

    import pippa_ops

    assert not (pathlib.Path(pippa_ops.__file__).parent / "typer_params.py").exists()


def test_a_sync_prints_its_line_without_loading_rich(tmp_path):
    make_project(tmp_path)
    plain = _PROBE.format(args=["sync", "local"])
    probe = plain.replace('"pydantic")', '"rich")')
    assert probe != plain  # the probe now watches rich
    argv = [sys.executable, "-c", probe]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "local: the repo itself is the remote dir" in p.stdout, p.stderr
    assert not [m for m in json.loads(p.stdout.split("LOADED ", 1)[1]) if m.startswith("rich")]


def test_version_is_the_installed_ones_and_loads_no_typer():
    """`pippa --version` prints the package's own version (no metadata scan, no typer): the same string."""
    from importlib.metadata import version

    import pippa_ops

    assert pippa_ops.__version__ == version("pippa")
    assert "pippa_ops.cli.typer_app" not in _loaded("--version")
