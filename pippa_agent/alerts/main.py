"""``alerts ...``: the one entry point of the host's alerts (``python3 -S -I <host program> alerts
event --run-dir DIR [--state S] [--reason LINE] [--detach]``, ``alarms --run-dir DIR [--detach]``
(a run's alarms, once each: alerts.alarms), ``send``, ``test``, ``watch``,
``watch-ensure``, ``watch-stop``, ``status``, ``retire-legacy``). ``--detach`` returns at once:
delivery never slows or fails a run. The target, PIPPA_NOTIFY, is read by the delivery process from
the 0600 secrets file: it never travels in argv, the environment of a job, a log or a message."""

from __future__ import annotations

import json
import os
import time

from pippa_agent.alerts.deliver import detach, emit
from pippa_agent.alerts.events import ended_disk_full, host_event, run_event
from pippa_agent.alerts.files import here, load_config, read_json, secret_target, secret_values, tail_lines
from pippa_agent.alerts.watch import check_disk, watch_ensure, watch_main, watch_stop, watcher_running
from pippa_contract import states
from pippa_contract.hostdirs import DELIVERIES, STOP_STATE, WATCH_STATE
from pippa_contract.secrets import HEARTBEAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def status() -> dict[str, Any]:
    """What `pippa hosts` shows: alerts configured (never the target), watcher, idle time, failures."""
    cfg = load_config()
    last_failure = None
    failures = 0
    for line in tail_lines(here(DELIVERIES)):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and not rec.get("ok"):
            failures += 1
            last_failure = rec
    running = watcher_running()
    st = read_json(here(WATCH_STATE)) if running else None
    st = st if isinstance(st, dict) else {}
    now = time.time()
    idle_since = st.get("idle_since")
    return {
        "configured": secret_target() is not None,
        "heartbeat": bool(secret_values().get(HEARTBEAT)),  # whether it is set, never the URL
        "watcher": st.get("pid") if running else None,
        "idle_alert_s": cfg.get("idle_alert_s"),
        "idle_s": now - idle_since if isinstance(idle_since, (int, float)) else None,
        "utilization": st.get("utilization"),
        "nvidia_smi": st.get("nvidia_smi") if running else None,  # what the watcher's PATH finds
        "failures": failures,
        "last_failure": last_failure,
        "cost_per_hour": cfg.get("cost_per_hour"),
        "cost_per_gpu_hour": cfg.get("cost_per_gpu_hour"),
        "gpus": cfg.get("gpus"),
        "stop": stop_status(cfg, now),
    }


def stop_status(cfg: dict[str, Any], now: float) -> dict[str, Any]:
    """What the stop command is armed on, what is armed now (and in how long), and how it last ran."""
    st = read_json(here(STOP_STATE))
    st = st if isinstance(st, dict) else {}
    armed = st.get("armed") if isinstance(st.get("armed"), dict) else None
    at = armed.get("at") if armed else None
    return {
        "when": (cfg.get("stop_when") or []) if cfg.get("stop_command") else [],
        "armed": armed,
        "in_s": at - now if isinstance(at, (int, float)) else None,
        "last": st.get("last"),
    }


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="agent.pyz alerts")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("event", help="tell PIPPA_NOTIFY about a run")
    ev.add_argument("--run-dir", required=True)
    ev.add_argument("--state", default=None)
    ev.add_argument("--reason", default=None)
    ev.add_argument("--detach", action="store_true", help="return at once; deliver in the background")
    al = sub.add_parser("alarms", help="tell PIPPA_NOTIFY, once each, about a run's alarms (alarms.json)")
    al.add_argument("--run-dir", required=True)
    al.add_argument("--detach", action="store_true", help="return at once; deliver in the background")
    for name in ("send", "test", "watch", "watch-ensure", "watch-stop", "status", "retire-legacy"):
        sub.add_parser(name)
    args = ap.parse_args(argv)
    if args.cmd == "send":
        from pippa_agent.alerts.send import send_main

        return send_main()
    if args.cmd == "event":
        if args.detach and not detach():
            return 0
        event = run_event(args.run_dir, args.state, args.reason)
        if event["state"] in (states.RUNNING, states.STOPPED) and args.state is None:
            return 0  # a stop is the user's own doing; nothing to tell
        if not ended_disk_full(args.run_dir):  # one alert for a full disk: the run's own
            check_disk(os.path.dirname(os.path.abspath(os.path.expanduser(args.run_dir))), {})
        result = emit(event)
        if not args.detach:
            print(json.dumps(result))
        return 0
    if args.cmd == "alarms":
        if args.detach and not detach():
            return 0
        from pippa_agent.alerts.alarms import tell_alarms

        told = tell_alarms(args.run_dir)
        if not args.detach:
            print(json.dumps({"told": told}))
        return 0
    if args.cmd == "test":
        if secret_target() is None:
            print(json.dumps({"sent": False, "configured": False, "error": "PIPPA_NOTIFY is not set"}))
            return 1
        result = emit(host_event("test", "", "a test message from pippa notify-test"))
        print(json.dumps(result))
        return 0 if result.get("sent") else 1
    if args.cmd == "retire-legacy":
        from pippa_agent.alerts.legacy import retire

        print(json.dumps(retire()))
        return 0
    handlers = {"watch": watch_main, "watch-ensure": watch_ensure, "watch-stop": watch_stop, "status": status}
    out = handlers[args.cmd]()
    if isinstance(out, dict):
        print(json.dumps(out))
        return 0
    return out if isinstance(out, int) else 0
