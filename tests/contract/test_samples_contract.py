"""samples.jsonl and the alarms (pippa_contract.samples, pippa_contract.alarms): the rules both the
trainer and the readers follow, on files built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pippa_contract import alarms
from pippa_contract import samples as sm
from pippa_contract.alerts import redact_secrets
from pippa_ops.runs.reading import samples as view


def _rows(steps: dict[int, list[float]], kind: str = "train") -> list[dict[str, object]]:
    return [
        sm.sample_row(s, kind, f"{i}+{i}=", f"answer {i} at {s}", index=i, reward=r, rewards={"f": r})
        for s, rewards in steps.items()
        for i, r in enumerate(rewards)
    ]


def _file(tmp_path: Path, rows: list[dict[str, object]], tail: bytes = b"") -> str:
    path = tmp_path / sm.SAMPLES
    path.write_bytes(b"".join(sm.encode(r) for r in rows) + tail)
    return str(path)


def test_select_picks_the_newest_step_a_given_step_and_the_steps_around_it(tmp_path: Path) -> None:
    path = _file(tmp_path, _rows({1: [0.0, 1.0], 5: [0.5, 0.2, 0.9], 10: [1.0, 0.0]}))
    newest = sm.select(path)
    assert newest["step"] == 10 and [r["index"] for r in newest["rows"]] == [0, 1]
    assert (newest["prev"], newest["next"]) == (5, None)
    mid = sm.select(path, step=5)
    assert {r["step"] for r in mid["rows"]} == {5} and (mid["prev"], mid["next"]) == (1, 10)
    assert [r["reward"] for r in sm.select(path, step=5, best=True)["rows"]] == [0.9, 0.5, 0.2]
    assert [r["reward"] for r in sm.select(path, step=5, worst=True, n=2)["rows"]] == [0.2, 0.5]
    assert sm.select(path, step=7)["rows"] == []
    assert sm.select(str(tmp_path / "none.jsonl"))["rows"] == []


def test_grep_returns_the_newest_rows_holding_the_text(tmp_path: Path) -> None:
    path = _file(tmp_path, _rows({1: [0.0, 1.0], 2: [0.5, 0.5]}))
    found = sm.select(path, grep="answer 1 at")
    assert [(r["step"], r["index"]) for r in found["rows"]] == [(2, 1), (1, 1)]
    assert sm.select(path, grep="answer 1 at", step=1)["rows"][0]["step"] == 1
    assert sm.select(path, grep='quote " and \\ slash')["rows"] == []


@pytest.mark.parametrize("block", [7, 64, 1 << 16])
def test_reading_from_the_end_ignores_a_partial_last_line_whatever_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(sm, "BLOCK", block)
    path = _file(tmp_path, _rows({1: [0.1], 2: [0.2], 3: [0.3]}), tail=b'{"type": "sample", "step": 4, "pro')
    assert [r["step"] for r in sm.rows_backward(path)] == [3, 2, 1]
    assert sm.select(path)["step"] == 3


def test_rows_are_redacted_clipped_and_kept_as_ascii_json() -> None:
    secret = "hf_abcdefSECRET123"
    values = {"HF_TOKEN": secret, "SHORT": "ab", "B": "abcd"}
    row = sm.sample_row(
        3, "train", "p", f"token {secret}\x1b[2J" + "x" * 3000, redact=lambda t: redact_secrets(t, values)
    )
    assert secret not in json.dumps(row) and "***" in row["completion"]
    assert row["completion"].endswith("chars]") and len(row["completion"]) < 2100
    assert b"\x1b" not in sm.encode(row) and sm.parse(sm.encode(row)) == row
    short = sm.sample_row(3, "train", "p", "ab and abcd", redact=lambda t: redact_secrets(t, values))
    assert short["completion"] == "ab and ***"  # values under 4 characters stay


def test_thinning_drops_old_steps_every_other_first_and_never_the_newest() -> None:
    steps = [(s, 100) for s in range(1, 21)]
    drop = sm.thin_plan(steps, 1500)
    assert 20 not in drop and sum(b for s, b in steps if s not in drop) <= 1500
    assert 1 not in drop  # the first step stays: the spread keeps the run's beginning
    assert sm.thin_plan([(5, 10_000)], 10) == set()  # the newest alone is never dropped


def test_a_resume_redoes_the_rows_past_its_checkpoint_and_a_torn_line() -> None:
    assert sm.redone(sm.encode(sm.sample_row(5, "train", "p", "c")), 4)
    assert not sm.redone(sm.encode(sm.sample_row(4, "eval", "p", "c")), 4)
    assert sm.redone(b'{"type": "sample", "st', 4) and not sm.redone(b'{"other": 1}', 4)


def test_a_completion_with_control_sequences_is_printed_escaped() -> None:
    nasty = "ok\x1b[2J\x1b]0;pwned\x07\rover\x08\u202eevil\x9b1m"
    lines = view.block(sm.sample_row(1, "train", "prompt\x1b[31m", nasty, reward=1.0), 80)
    text = "\n".join(t for _, t in lines)
    assert all(ord(c) >= 0x20 or c == "\n" for c in text) and "\u202e" not in text and "\x9b" not in text
    assert "\\x1b[2J" in text and "\\x07" in text and "\\u202e" in text and "\\x9b" in text
    assert all(len(t) <= 80 for _, t in lines)


def test_diff_pairs_the_same_prompt_at_two_steps_side_by_side() -> None:
    a = _rows({1: [0.0, 1.0]})
    b = _rows({9: [1.0]})
    pairs = sm.diff_rows(a, b)
    assert [(x["step"], y["step"], x["prompt"]) for x, y in pairs] == [(1, 9, "0+0=")]
    lines = view.side_by_side({"pairs": [list(p) for p in pairs], "diff": [1, 9]}, 80)
    assert any("answer 0 at 1" in t and "answer 0 at 9" in t for _, t in lines)
    assert all(len(t) <= 80 for _, t in lines)


def _steps(key: str, values: list[float], start: int = 1) -> list[dict[str, object]]:
    return [{"type": "step", "step": start + i, key: v} for i, v in enumerate(values)]


def test_no_learning_signal_begins_where_the_zero_spread_run_began() -> None:
    steps = _steps("reward/frac_zero_std", [0.2, 0.5, 0.95, 1.0, 1.0, 0.3, 0.92, 1.0, 0.97])
    (a,) = alarms.raised(steps, [], {"zero_std_steps": 3})
    assert (a["kind"], a["since"]) == (alarms.NO_LEARNING_SIGNAL, 3)
    assert alarms.raised(steps, [], {"zero_std_steps": 5}) == []
    assert alarms.raised(steps, [], {"zero_std_steps": 3, "zero_std_threshold": 0.99}) == []


def test_length_collapse_and_truncation_that_set_in_but_not_from_the_start() -> None:
    shrink = _steps("completions/mean_length", [40.0] * 5 + [30.0] * 3 + [12.0] * 6)
    (a,) = alarms.raised(shrink, [], {"length_window": 5})
    assert a["kind"] == alarms.LENGTH_COLLAPSE and a["since"] == 9
    pinned = [
        {**s, "completions/clipped_ratio": c}
        for s, c in zip(_steps("x", [0.0] * 12), [0.1] * 4 + [1.0] * 8, strict=True)
    ]
    (b,) = alarms.raised(pinned, [], {"length_window": 4})
    assert b["kind"] == alarms.LENGTH_COLLAPSE and b["since"] == 5
    always = [{**s, "completions/clipped_ratio": 1.0} for s in _steps("x", [0.0] * 12)]
    assert alarms.raised(always, [], {"length_window": 4}) == []  # tiny: one-token answers, by design


def test_reward_without_substance_needs_the_reward_up_while_the_eval_falls() -> None:
    steps = _steps("reward/mean", [0.1] * 10 + [0.8] * 10)
    evals = [{"type": "eval", "step": s, "eval/accuracy": a} for s, a in ((0, 0.1), (10, 0.6), (20, 0.3))]
    (a,) = alarms.raised(steps, evals)
    assert a["kind"] == alarms.REWARD_WITHOUT_SUBSTANCE and a["since"] == 20
    falling = _steps("reward/mean", [0.8] * 10 + [0.1] * 10)
    assert alarms.raised(falling, evals) == []
    rising = [{**e, "eval/accuracy": 0.1 * i} for i, e in enumerate(evals)]
    assert alarms.raised(steps, rising) == []


def test_alarms_from_a_metrics_file_follow_the_resume_rule(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    recs = [
        {"type": "header", "resumed_from_step": None},
        *_steps("reward/frac_zero_std", [1.0] * 6),
        {"type": "header", "resumed_from_step": 2},
        *_steps("reward/frac_zero_std", [0.1] * 4, start=3),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert alarms.from_metrics(str(path), {"zero_std_steps": 3}) == []
    record = str(tmp_path / "alarms.json")
    alarms.write_alarms(record, [{"kind": alarms.NO_LEARNING_SIGNAL, "since": 1}])
    assert alarms.read_alarms(record)[0]["since"] == 1
    assert "no learning signal (step 1)" in str(alarms.warning(alarms.read_alarms(record)))


@pytest.mark.parametrize("block", [64, 1 << 16])
def test_a_step_is_found_by_bisection_with_its_neighbours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(sm, "BLOCK", block)
    steps = {s: [0.1 * i for i in range(3)] for s in range(0, 300, 7)}
    path = _file(tmp_path, _rows(steps) + _rows({300: [1.0]}, kind="eval"))
    order = [*steps, 300]
    for target in range(-3, 305):
        got = sm.select(path, step=target, n=10)
        want = [s for s in order if s == target]
        assert {r["step"] for r in got["rows"]} == set(want), target
        assert got["prev"] == max((s for s in order if s < target), default=None), target
        assert got["next"] == min((s for s in order if s > target), default=None), target
    assert sm.select(path, step=294, kind="train")["next"] is None  # step 300 has eval rows only
