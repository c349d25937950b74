"""Alerts from the host (Apprise), the idle-GPU watcher, and what runs cost."""
