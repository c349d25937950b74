"""``pippa dash``: the Textual dashboard (TUI layer on top of ``pippa_ops.monitor.host``)."""

from pippa_ops.dash.app import DashApp, create_app

__all__ = ["DashApp", "create_app"]
