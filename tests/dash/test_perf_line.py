"""The run view's perf line: the newest step's generation share, tokens/s per phase, and corrected MFU
with HFU beside it (training_core.run.flops), read from metrics.jsonl as it streams."""

from __future__ import annotations

import json

import dash_state as S
import pytest
from textual.widgets import Static

from pippa_ops.dash import create_app
from pippa_ops.monitor.state import MetricsParser

GEN = {"perf/gen_share": 0.93, "perf/gen_tokens_per_s": 3395.0, "perf/train_tokens_per_s": 80423.0}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _parsed(*steps: dict[str, float]) -> MetricsParser:
    p = MetricsParser()
    recs = [{"type": "header"}] + [{"type": "step", "step": i + 1, **s} for i, s in enumerate(steps)]
    p.feed(b"".join(json.dumps(r).encode() + b"\n" for r in recs))
    return p


@pytest.mark.anyio
async def test_the_run_view_shows_the_newest_steps_speed_and_mfu_beside_hfu() -> None:
    p = _parsed({**GEN, "perf/mfu": 0.5, "perf/hfu": 0.9}, {**GEN, "perf/mfu": 0.212, "perf/hfu": 0.3})
    detail = p.detail("gpu-a", "20260101-120000-max_gpu-ab12", ())
    app = create_app(S.HOSTS, states=S.states(), detail=detail)
    async with app.run_test(size=(160, 48)):
        title = str(app.query_one("#run-title", Static).render())
    assert (
        "generation 93% of the step · gen 3,395 tok/s · train 80,423 tok/s · MFU 21.2% (HFU 30.0%)" in title
    )


@pytest.mark.anyio
async def test_a_cpu_run_without_mfu_shows_its_phases_only_and_an_old_run_no_line() -> None:
    cpu = _parsed({"loss/total": 0.1, **GEN}).detail("gpu-a", "20260101-120000-tiny-ab12", ())
    app = create_app(S.HOSTS, states=S.states(), detail=cpu)
    async with app.run_test(size=(160, 48)):
        title = str(app.query_one("#run-title", Static).render())
    assert "generation 93% of the step" in title and "MFU" not in title
    old = _parsed({"loss/total": 0.1, "perf/tokens_per_s": 10.0}).detail("h", "r", ())
    assert old.perf == {}
