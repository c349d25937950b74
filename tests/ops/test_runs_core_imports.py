"""The run/tmux/gpu/follow core stays importable without the CLI and TUI stacks (the dashboard reuses it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = (
    "transport.base",
    "transport.ssh",
    "transport.agent_client",
    "hosts.connect",
    "hosts.inventory",
    "sync",
    "runs.records.tmux",
    "runs.launching.launch",
    "runs.records.listing",
    "runs.launching.script",
    "runs.records.follow",
    "gpu",
    "monitor.host",
    "monitor.state",
    "provision.prep",
    "provision.envfile",
    "fanout",
    "runs.launching.recipes",
)


@pytest.mark.parametrize("module", CORE)
def test_core_module_loads_no_typer_rich_textual_or_torch(module: str) -> None:
    """Each core module alone, in a fresh interpreter: the CLI/TUI stacks and torch stay out."""
    code = (
        "import sys\n"
        f"import pippa_ops.{module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'textual', 'torch'))\n"
        "print(','.join(bad))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "", f"pippa_ops.{module} loads {p.stdout.strip()}"


def test_commands_on_local_load_no_paramiko() -> None:
    """Resolving and running on ``local`` never needs SSH: paramiko (and invoke) stay unloaded."""
    code = (
        "import sys\n"
        "from pippa_ops.hosts.connect import connect\n"
        "spec, t = connect('local')\n"
        "assert t.run(['echo', 'hi']).stdout == 'hi\\n'\n"
        "print(sorted(m for m in ('paramiko', 'invoke') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_paramiko_loads_without_importlib_metadata_and_keeps_its_version() -> None:
    """paramiko reads its own version through importlib.metadata as it imports; pippa's import of it
    answers that from paramiko's dist-info, leaves no stand-in behind, and a later user of
    importlib.metadata gets the real module with the same answer."""
    code = (
        "import sys\n"
        "from pippa_ops.transport._paramiko import paramiko\n"
        "print(sorted(m for m in ('importlib.metadata', 'email', 'zipfile') if m in sys.modules))\n"
        "import importlib\n"
        "print('metadata' in importlib.__dict__)\n"
        "from importlib import metadata\n"
        "print(type(metadata).__name__, metadata.version('paramiko') == paramiko.__version__ != '')\n"
        "print(metadata.version('typer') == metadata.distribution('typer').version)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.splitlines() == ["[]", "False", "module True", "True"], p.stdout
