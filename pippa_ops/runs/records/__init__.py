"""A host's run records in one agent round trip, its tmux sessions, a run's files followed, short ids,
cost: what every other part of runs reads; it imports none of them."""
