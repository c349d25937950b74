"""The keeper's worker threads: no more than asked for, and none left once the work is done."""

from __future__ import annotations

import threading
import time

from pippa_ops.transport.keeper_workers import Workers


def test_workers_run_everything_on_at_most_most_threads_and_end_when_idle() -> None:
    workers = Workers(3, idle_s=0.2)
    release, done = threading.Event(), []
    lock = threading.Lock()

    def job(i: int) -> None:
        release.wait(10)
        with lock:
            done.append(i)

    for i in range(7):
        workers.submit(lambda i=i: job(i))
    assert workers.live == 3
    release.set()
    deadline = time.monotonic() + 10
    while (workers.live or len(done) < 7) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(done) == list(range(7)) and workers.live == 0
    workers.submit(lambda: done.append(7))  # a thread starts again for new work
    deadline = time.monotonic() + 10
    while len(done) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done[-1] == 7
