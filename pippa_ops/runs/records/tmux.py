"""One tmux layer for the local tmux server and a host's own server, over any Transport.

libtmux only drives a local server; pippa's sessions live on the GPU host's server, reached over SSH.
So every tmux command here is an argument list built by a small pure function (unit-tested without
tmux) and run through a ``Transport``: ``LocalTransport`` for the host ``local``, SSH for the rest.
Session names are validated before they reach any shell; targets use tmux's ``=name`` exact match
so ``train`` never silently resolves to ``training``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pippa_contract.runpick import session_rows
from pippa_contract.sessions import IDENTITY_FORMAT as IDENTITY_FORMAT
from pippa_contract.sessions import identity
from pippa_ops.errors import ToolMissing
from pippa_ops.transport.base import CommandResult
from pippa_ops.transport.shell import validate_session

TMUX = "tmux"
# Exit status a shell gives for "command not found"; how we learn tmux is missing on a host.
NOT_FOUND_STATUS = 127


@dataclass(frozen=True)
class SessionInfo:
    """One tmux session on a host's server."""

    name: str
    created: float  # unix time on the host
    attached: int  # number of clients attached
    windows: int
    id: str = ""  # tmux's "$N", unique within one server's life

    @property
    def identity(self) -> str:
        """Same text as IDENTITY_FORMAT renders for this session."""
        return identity(self.id, self.created)


def target(session: str, pane: bool = False) -> str:
    """Exact-match target for ``session`` (``=name``); ``=name:`` names its current pane."""
    validate_session(session)
    return f"={session}:" if pane else f"={session}"


def new_session_argv(session: str, argv: Sequence[str], width: int = 200, height: int = 50) -> list[str]:
    """Detached session running ``argv`` directly (several arguments: tmux execs them, no shell).

    It prints the new session's identity (IDENTITY_FORMAT) at once: a job that ends in a blink
    takes its session and server with it, so asking afterwards would race.
    """
    validate_session(session)
    if len(argv) < 2:
        raise ValueError("give the command as an argument list of at least two items (tmux execs it)")
    size = ["-x", str(width), "-y", str(height)]
    return [TMUX, "new-session", "-d", "-P", "-F", IDENTITY_FORMAT, "-s", session, *size, *argv]


def interrupt_argv(session: str) -> list[str]:
    """Ctrl-C to the session's active pane, as a person would type it (a trainer can save)."""
    return [TMUX, "send-keys", "-t", target(session, pane=True), "C-c"]


def kill_session_argv(session: str) -> list[str]:
    return [TMUX, "kill-session", "-t", target(session)]


def capture_pane_argv(session: str, lines: int = 50) -> list[str]:
    """The pane's visible screen plus ``lines`` of scrollback, as plain text."""
    return [TMUX, "capture-pane", "-p", "-t", target(session, pane=True), "-S", f"-{int(lines)}"]


def attach_argv(session: str) -> list[str]:
    return [TMUX, "attach-session", "-t", target(session)]


def switch_client_argv(session: str) -> list[str]:
    """From inside tmux (``$TMUX`` set, same server): move this client instead of nesting one."""
    return [TMUX, "switch-client", "-t", target(session)]


def parse_sessions(text: str) -> list[SessionInfo]:
    """Parse ``list-sessions -F sessions.LIST_FORMAT`` output; malformed lines are skipped."""
    return [SessionInfo(*row) for row in session_rows(text)]


def check_tool(result: CommandResult, tool: str = TMUX) -> CommandResult:
    """Raise ToolMissing when the host's shell could not find ``tool``."""
    if result.exit_status == NOT_FOUND_STATUS and "not found" in (result.stderr + result.stdout):
        raise ToolMissing(
            f"{result.host}: {tool} is not installed (install it, e.g. `sudo apt-get install {tool}`)"
        )
    return result
