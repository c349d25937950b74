"""The two shell lines that call the host's alerts program, built once and quoted here (no host needed
to test them): the laptop's call (`pippa up`, `notify-test`, `hosts`) and the run's end in cmd.sh."""

from __future__ import annotations

import shlex

from pippa_ops.alerts import hostalerts
from pippa_ops.transport.shell import sh_path


def program_command(*args: str) -> str:
    """``python3 -S <program> ARGS`` on the host; a host without the program (no `pippa up` since
    alerts came) answers ``{"missing": true}`` and exit 3."""
    prog = sh_path(hostalerts.PROGRAM)
    call = " ".join(["python3", "-S", prog, *(shlex.quote(a) for a in args)])
    return f"if [ -f {prog} ]; then exec {call}; else echo '{{\"missing\": true}}'; exit 3; fi"


def run_end_line() -> str:
    """The one line cmd.sh runs when its job ended: tell PIPPA_NOTIFY, in the background, silently."""
    prog = sh_path(hostalerts.PROGRAM)
    return f'[ -f {prog} ] && python3 -S {prog} event --run-dir "$RUN_DIR" --detach >/dev/null 2>&1 || :'
