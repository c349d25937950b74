"""The dashboard's slower looks at a host beside its run list: its last ``pippa doctor`` verdict
(every 5 minutes: it changes only when doctor or ``up`` runs) and, for a host entry with a ``stop``
command, what stop is armed and when it fires (every 30 s, the alerts status ``pippa hosts`` reads)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.monitor.state import DoctorRead, HostEvent, StopRead
from pippa_ops.transport.base import Transport

DOCTOR_EVERY_S = 300.0
STOP_EVERY_S = 30.0  # an armed stop's notice is minutes (stop_notice, 5m by default)


class Looks:
    """When each look is due (monotonic clock); ``due`` takes the ones that are, on the poll's link."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self._doctor_due = self._stop_due = 0.0

    def due(self, t: Transport, emit: Callable[[HostEvent], None]) -> None:
        """Raises what the transport raises: the poll treats a lost link as for its run list."""
        if time.monotonic() >= self._doctor_due:
            self._doctor_due = time.monotonic() + DOCTOR_EVERY_S
            self._last_doctor(t, emit)
        if self.spec.stop and time.monotonic() >= self._stop_due:
            self._stop_due = time.monotonic() + STOP_EVERY_S
            from pippa_ops.provision.alerts import host_status

            stop = (host_status(t) or {}).get("stop")
            emit(StopRead(self.spec.name, stop if isinstance(stop, dict) else None, time.time()))

    def _last_doctor(self, t: Transport, emit: Callable[[HostEvent], None]) -> None:
        """The host's newest doctor verdict and its time (the ``doctor_history`` verb), when it has one."""
        from pippa_ops.doctor import last_summary

        if (found := last_summary(self.spec, t)) and isinstance(found.get("verdict"), str):
            when = found.get("time")
            at = float(when) if isinstance(when, int | float) else None
            emit(DoctorRead(self.spec.name, str(found["verdict"]), at))
