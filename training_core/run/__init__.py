"""One run's life on the host, the same for every method: its lifecycle (resume, seed, W&B, signals,
the failed-start record), its directory's layout, its metrics record, its samples (``samples``), the
alarm watch, the divergence stop, and the failures on demand of pippa's tests (``testhooks``)."""
