"""Runs, laptop side, in four sub-packages that import one way (each only those above it):
``records`` (a host's run records, its tmux sessions, following a run's files, short ids, cost),
``launching`` (recipes, the scripts, the schedulers, launch/stop/resume, recover), ``moving`` (which
host holds a run, a stale copy ended, move and failover, pull, rm/prune) and ``reading`` (logs, why,
samples, curves and compare, the catalog, wait)."""
