"""The host program as a file: the zipapp ``~/.cache/pippa/agent-<sha>.pyz`` (pippa_contract.hostdirs)
that the bootstrap stores beside its cache, run as ``python3 -S -I FILE {serve|supervise RUN_DIR|
recover REMOTE_DIR|alerts ...}`` by cmd.sh, the ``@reboot`` line and the alert hook."""

from __future__ import annotations

import sys

USAGE = "usage: agent.pyz serve | supervise RUN_DIR | task DIR RECIPE LINE | recover DIR | alerts ...\n"


def main(argv: list[str]) -> int:
    """One entry, one subcommand; each imports only what it needs."""
    cmd, rest = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "serve" and not rest:
        from pippa_agent.serve import read_frame, serve

        serve(read_frame())
        return 0
    if cmd == "supervise" and len(rest) == 1:
        from pippa_agent.supervise import supervise

        return supervise(rest[0])
    if cmd == "task" and len(rest) == 3:  # an exported task's run (pippa export --to skypilot)
        from pippa_agent.supervise import supervise_task

        return supervise_task(*rest)
    if cmd == "recover" and len(rest) == 1:
        import json

        from pippa_agent.supervise.recover import recover_lost

        sys.stdout.write(json.dumps(recover_lost(rest[0])) + "\n")
        return 0
    if cmd == "alerts":
        from pippa_agent.alerts.main import main as alerts_main

        return alerts_main(rest)
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":  # ``python -m pippa_agent.program``, from a checkout (an exported task)
    sys.exit(main(sys.argv[1:]))
