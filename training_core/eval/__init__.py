"""Held-out evaluation: the task table (``tasks``), greedy scoring and the interval callback
(``greedy``), and ``python -m training_core.eval`` (``cli``)."""
