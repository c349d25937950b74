"""A tmux session as both sides name it: the list format the agent asks tmux for and the laptop
parses (``runpick.session_rows``), and the identity a launch records in each run directory
(``tmux_session``), so a later session reusing the name is never mistaken for the run's."""

from __future__ import annotations

# "|"-separated: tmux replaces a tab in -F output with "_" when the client has no UTF-8 terminal (ssh).
LIST_FORMAT = "#{session_name}|#{session_created}|#{session_attached}|#{session_windows}|#{session_id}"
# tmux's "$N" (unique within one server's life) and the session's creation time: unique on a host.
IDENTITY_FORMAT = "#{session_id}@#{session_created}"


def identity(session_id: str, created: float) -> str:
    """The text IDENTITY_FORMAT renders for a session with this id and creation time."""
    return f"{session_id}@{int(created)}"
