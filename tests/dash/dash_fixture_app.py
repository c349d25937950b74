"""Runs the dashboard on the fixed 8-GPU state with a long run state (dash_state), for a real terminal:
``python dash_fixture_app.py`` inside tmux (test_layout_in_terminal)."""

from __future__ import annotations

import dash_state as S

from pippa_ops.dash import create_app

if __name__ == "__main__":
    create_app(S.EIGHT_HOSTS, states=S.eight_long_states(), detail=S.eight_detail()).run()
