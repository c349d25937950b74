"""Where pippa keeps its own files on a host (outside a project's ``remote_dir``), and the host
program's stable file: ``~/.cache/pippa/agent-<sha>.pyz`` (docs/CONTRACTS.md, "The host program")."""

from __future__ import annotations

CACHE_DIR = "~/.cache/pippa"  # the bootstrap's cache (pippa_agent/bootstrap.py says the same)
PINS = "pins"  # under CACHE_DIR: which program versions a run, the @reboot line or the alerts use
ALERTS_DIR = "~/.config/pippa/alerts"
ALERTS_CONFIG = "config.json"
DELIVERIES = "deliveries.jsonl"
WATCH_STATE = "watch.json"
WATCH_LOCK = "watch.lock"
STOP_STATE = "stop.json"  # the host's stop command: what fired, what is armed (pippa_agent.alerts.stopper)
STOP_CANCEL = "stop.cancel"  # written by `pippa keep HOST`: the armed stop is called off
ALERTS_PROGRAM = ALERTS_DIR + "/agent.pyz"  # a link to the host program `pippa up` set the alerts up with
BOOT_PROGRAM = "~/.local/share/pippa/agent.pyz"  # a link to the host program the @reboot line runs
RUN_PROGRAM = "agent.pyz"  # in a run directory: a link to the program version the run started with
# What earlier versions installed, removed by the next `pippa up`.
LEGACY_ALERTS_PROGRAM = ALERTS_DIR + "/hostalerts.py"
LEGACY_SUPERVISOR = "~/.local/share/pippa/supervise.py"


def program_file(sha: str) -> str:
    """The host program of bundle ``sha``: a zipapp run as ``python3 -S -I FILE SUBCOMMAND ...``."""
    return f"{CACHE_DIR}/agent-{sha}.pyz"
