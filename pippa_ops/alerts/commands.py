"""The two shell lines that call the host's alerts (``alerts ...`` of the host program), built once and
quoted here (no host needed to test them): the laptop's call (`pippa up`, `notify-test`, `hosts`) and
the run's end in cmd.sh."""

from __future__ import annotations

import shlex

from pippa_contract.hostdirs import ALERTS_CONFIG, ALERTS_DIR, ALERTS_PROGRAM, RUN_PROGRAM
from pippa_ops.transport.shell import sh_path


def program_command(*args: str) -> str:
    """``python3 -S -I <program> alerts ARGS`` on the host; a host without the program (no `pippa up`
    since alerts came) answers ``{"missing": true}`` and exit 3."""
    prog = sh_path(ALERTS_PROGRAM)
    call = " ".join(["python3", "-S", "-I", prog, "alerts", *(shlex.quote(a) for a in args)])
    return f"if [ -f {prog} ]; then exec {call}; else echo '{{\"missing\": true}}'; exit 3; fi"


def run_end_line() -> str:
    """The one line cmd.sh runs when its job ended: tell PIPPA_NOTIFY, in the background, silently,
    through the host program the run started with, where `pippa up` set alerts up."""
    config = sh_path(f"{ALERTS_DIR}/{ALERTS_CONFIG}")
    prog = f'"$RUN_DIR/{RUN_PROGRAM}"'
    return (
        f"[ -f {config} ] && [ -f {prog} ] && python3 -S -I {prog} alerts event "
        '--run-dir "$RUN_DIR" --detach >/dev/null 2>&1 || :'
    )
