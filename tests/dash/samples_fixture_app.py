"""Runs the dashboard with a run whose samples fill several screens, for a real terminal:
``python samples_fixture_app.py`` inside tmux (test_samples_screen), then key ``w``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import dash_state as S

from pippa_contract import samples as sm
from pippa_ops.dash import create_app

if __name__ == "__main__":
    from test_samples_screen import RUN, _SampleMonitor

    home = Path(tempfile.mkdtemp(prefix="pippa-samples-"))
    run = home / RUN
    run.mkdir()
    rows = [
        sm.sample_row(
            40,
            "train",
            f"{i}+40= " * 30,
            "a long answer " * 40,
            index=i,
            reward=float(i),
            rewards={"correct": i},
        )
        for i in range(12)
    ]
    (run / sm.SAMPLES).write_bytes(b"".join(sm.encode(r) for r in rows))
    mons = {h: _SampleMonitor(h, run if h == "gpu-a" else home) for h in S.HOSTS}
    create_app(S.HOSTS, mons, states=S.states()).run()  # type: ignore[arg-type]
    sys.exit(0)
