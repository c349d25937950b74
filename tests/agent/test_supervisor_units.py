"""The run supervisor (pippa_agent.supervise) as a host program: Python 3.8 and the standard library
only, and the alerts it tells mid-run (cmd.sh tells the start and the end)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from pippa_agent.supervise import supervisor

SUPERVISOR = Path(supervisor.__file__).parent  # the supervisor's package


def test_the_supervisor_is_python_3_8_and_standard_library_only() -> None:
    """Standard library and the host bundle's own packages (the contract, the agent) only."""
    imported: set[str] = set()
    for path in SUPERVISOR.glob("*.py"):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        imported |= {
            a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
        imported |= {
            n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
        }
    assert imported - {"__future__", "pippa_contract", "pippa_agent"} <= set(sys.stdlib_module_names)


def test_the_supervisor_tells_alerts_only_of_the_events_between_start_and_end() -> None:
    """The supervisor and the alerts are one host program now: it tells the events cmd.sh cannot."""
    assert set(supervisor.MID_RUN_ALERTS) <= {"retrying", "stalled", "diverged", "gave_up", "lost", "budget"}
