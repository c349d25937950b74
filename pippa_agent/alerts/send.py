"""``alerts send``: the delivery itself, one message from stdin to PIPPA_NOTIFY through Apprise. The one
module of the host program that runs under the host's training Python (where `pippa up` installs
Apprise) rather than the bare ``python3``, and the only one that imports something outside the
standard library."""

from __future__ import annotations

import json
import sys

from pippa_agent.alerts.files import secret_target
from pippa_contract.alerts import redact


def send_main() -> int:
    """``send``: one message from stdin to PIPPA_NOTIFY; prints ``{"ok", "error"}`` (error redacted)."""
    req = json.loads(sys.stdin.read())
    target = secret_target()
    if target is None:
        print(json.dumps({"ok": False, "error": "PIPPA_NOTIFY is not set on this host (pippa up)"}))
        return 1
    try:
        import logging

        import apprise
    except ImportError:
        why = f"Apprise is not installed in {sys.executable} (pippa up installs it)"
        print(json.dumps({"ok": False, "error": why}))
        return 1
    notifier = apprise.Apprise()
    if not notifier.add(target):
        print(json.dumps({"ok": False, "error": "PIPPA_NOTIFY holds no Apprise URL it understands"}))
        return 1
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:  # type: ignore[no-untyped-call]
        ok = bool(notifier.notify(body=req["body"], title=req["title"], notify_type=req.get("type", "info")))
    lines = [ln for ln in logs.getvalue().splitlines() if ln.strip()]
    error = None if ok else redact(lines[-1] if lines else "the service refused the message", target)[:300]
    print(json.dumps({"ok": ok, "error": error}))
    return 0 if ok else 1
