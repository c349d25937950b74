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


def test_commands_on_local_load_no_ssh_library() -> None:
    """Resolving and running on ``local`` never needs SSH: asyncssh stays unloaded."""
    code = (
        "import sys\n"
        "from pippa_ops.hosts.connect import connect\n"
        "spec, t = connect('local')\n"
        "assert t.run(['echo', 'hi']).stdout == 'hi\\n'\n"
        "print(sorted(m for m in ('asyncssh',) if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"
