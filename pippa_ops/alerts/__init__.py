"""Alerts from the host (Apprise), the idle-GPU watcher program, and the settings that configure them."""
