"""SFT and DPO runs sample nothing: the dashboard draws their own curves in the reward and length slots;
a self-play run shows its invalid-move rate and its games against a random player."""

from __future__ import annotations

import json

import dash_state as S
import pytest

from pippa_ops.dash import create_app
from pippa_ops.dash.run_view import MetricPlot
from pippa_ops.monitor.state import MetricsParser, RunDetail


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _detail(series: dict[str, tuple[tuple[int, float], ...]]) -> RunDetail:
    return RunDetail("gpu-a", "20260101-120000-dpo_tiny-ab12", series=series, has_metrics=True)


def test_parser_keeps_the_dpo_and_sft_curves() -> None:
    p = MetricsParser()
    step = {
        "type": "step",
        "step": 1,
        "loss/total": 0.69,
        "rewards/margins": 0.1,
        "rewards/accuracies": 0.75,
        "policy/token_accuracy": 0.5,
    }
    p.feed(b"".join(json.dumps(r).encode() + b"\n" for r in ({"type": "header"}, step)))
    assert p.series["rewards/margins"] == [(1, 0.1)] and p.series["rewards/accuracies"] == [(1, 0.75)]
    assert p.series["policy/token_accuracy"] == [(1, 0.5)] and p.series["loss/total"] == [(1, 0.69)]
    assert p.series["reward/mean"] == []


@pytest.mark.anyio
async def test_a_dpo_run_shows_margin_and_preference_accuracy_an_sft_run_token_accuracy() -> None:
    pts = tuple((s, s / 10) for s in range(1, 6))
    dpo = {
        "loss/total": pts,
        "rewards/margins": pts[:4],
        "rewards/accuracies": pts[:3],
        "policy/token_accuracy": pts[:2],
    }
    app = create_app(S.HOSTS, states=S.states(), detail=_detail(dpo))
    async with app.run_test(size=(160, 48)):
        assert app.query_one("#plot-reward-mean", MetricPlot)._points == pts[:4]
        assert app.query_one("#plot-completions-mean_length", MetricPlot)._points == pts[:3]
        assert app.query_one("#plot-loss-total", MetricPlot)._points == pts
    sft = {"loss/total": pts, "policy/token_accuracy": pts[:2]}
    app = create_app(S.HOSTS, states=S.states(), detail=_detail(sft))
    async with app.run_test(size=(160, 48)):
        assert app.query_one("#plot-completions-mean_length", MetricPlot)._points == pts[:2]
        assert app.query_one("#plot-reward-mean", MetricPlot)._points == ()


@pytest.mark.anyio
async def test_a_selfplay_run_shows_invalid_moves_and_wins_against_random() -> None:
    p = MetricsParser()
    length = {"completions/mean_length": 1.0}
    recs = [
        {"type": "header"},
        {"type": "step", "step": 1, "reward/mean": -0.4, "game/invalid_rate": 0.9, **length},
        {"type": "step", "step": 2, "reward/mean": -0.1, "game/invalid_rate": 0.5, **length},
        {"type": "eval", "step": 2, "eval/vs_random/win": 0.3, "eval/vs_random/invalid": 0.4},
    ]
    p.feed(b"".join(json.dumps(r).encode() + b"\n" for r in recs))
    assert p.series["game/invalid_rate"] == [(1, 0.9), (2, 0.5)]
    assert p.evals == {"eval/vs_random/win": [(2, 0.3)], "eval/vs_random/invalid": [(2, 0.4)]}
    series = {k: tuple(v) for k, v in p.series.items()}
    app = create_app(S.HOSTS, states=S.states(), detail=_detail(series))
    async with app.run_test(size=(160, 48)):
        assert app.query_one("#plot-completions-mean_length", MetricPlot)._points == ((1, 0.9), (2, 0.5))
        assert app.query_one("#plot-reward-mean", MetricPlot)._points == ((1, -0.4), (2, -0.1))
