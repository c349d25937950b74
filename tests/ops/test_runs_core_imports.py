"""The run/tmux/gpu/follow core stays importable without the CLI and TUI stacks (the dashboard reuses it)."""

from __future__ import annotations

import subprocess
import sys


def test_core_modules_load_no_typer_rich_or_textual() -> None:
    code = (
        "import sys\n"
        "import pippa_ops.tmux, pippa_ops.runs, pippa_ops.runs_list, pippa_ops.runs_script\n"
        "import pippa_ops.gpu, pippa_ops.follow, pippa_ops.recipes\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'textual', 'torch'))\n"
        "print(','.join(bad))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == ""


def test_commands_on_local_load_no_paramiko() -> None:
    """Resolving and running on ``local`` never needs SSH: paramiko (and invoke) stay unloaded."""
    code = (
        "import sys\n"
        "from pippa_ops.connect import connect\n"
        "spec, t = connect('local')\n"
        "assert t.run(['echo', 'hi']).stdout == 'hi\\n'\n"
        "print(sorted(m for m in ('paramiko', 'invoke') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"
