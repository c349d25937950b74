"""Where a run is and moving it: which host holds run X (a stale copy left by a failover is ended
there), ``resume --on`` and ``--failover``, pull to the laptop, rm/prune. Imports ``runs.records`` and
``runs.launching``."""
