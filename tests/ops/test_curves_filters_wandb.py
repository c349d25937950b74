"""The daily loop's pure parts and host-agent verbs on this machine: curves (EMA, integer ticks, resume,
config diff), run summaries, the pull rule for replaced files, filters, wait's exit status, notices,
and the W&B listing against a stand-in with wandb.Api's runs()/summary shape."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPPA
from projects import make_project

from pippa_contract.metrics import summarize
from pippa_ops.errors import RunNotFound, UsageError, WaitTimeout
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.runs.moving.pull import pull_run
from pippa_ops.runs.reading.catalog import infos_from_answer, parse_since, select
from pippa_ops.runs.reading.curves import (
    config_diff,
    ema,
    integer_ticks,
    parse_metrics,
    smooth,
    ticks_for_width,
)
from pippa_ops.runs.reading.wait import exit_status
from pippa_ops.runs.records.listing import RunRecord
from pippa_ops.transport.base import LocalTransport
from pippa_ops.transport.forward import PortSpec, parse_port_spec


def lines(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


HEADER = {"type": "header", "run_id": "r", "recipe": "tiny", "config": {"train": {"lr": 1}}, "wandb": None}
RESUMED_RUN = (
    lines(
        HEADER,
        {"type": "step", "step": 1, "reward/mean": 0.1},
        {"type": "step", "step": 2, "reward/mean": 0.9},
        {"type": "eval", "step": 2, "eval/accuracy": 0.5},
        {"type": "step", "step": 3, "reward/mean": 0.95},  # a killed run's step 3, redone after the resume
        {**HEADER, "resumed_from_step": 2, "wandb": {"id": "w1", "url": None, "mode": "offline"}},
        {"type": "step", "step": 3, "reward/mean": 0.3},
        {"type": "end", "status": "completed", "step": 3},
    )
    + b'{"type": "step", "st'
)  # a torn last line


def test_curves_read_a_resumed_file_once_per_step_and_ignore_a_torn_line() -> None:
    c = parse_metrics(RESUMED_RUN)
    assert c.series("reward/mean") == ((1, 0.1), (2, 0.9), (3, 0.3))
    assert c.series("eval/accuracy") == ((2, 0.5),) and c.end == "completed" and c.recipe == "tiny"


def test_the_agents_summary_reads_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(RESUMED_RUN)
    s = summarize(str(tmp_path / "metrics.jsonl"))
    assert s is not None
    assert (s["last_step"], s["final_reward"], s["best_reward"], s["best_step"]) == (3, 0.3, 0.9, 2)
    assert s["eval"] == {"step": 2, "eval/accuracy": 0.5} and s["wandb"]["id"] == "w1"
    assert s["end"] == {"status": "completed", "step": 3, "error": None}
    assert summarize(str(tmp_path / "none.jsonl")) is None


def test_ema_is_tensorboards_debiased_average() -> None:
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])  # no pull toward 0 at the start
    assert ema([0.0, 1.0], 0.5) == pytest.approx([0.0, 0.5 / 0.75])
    assert smooth(((1, 1.0), (5, 3.0)), 0.0) == ((1, 1.0), (5, 3.0))
    with pytest.raises(ValueError):
        ema([1.0], 1.0)


@pytest.mark.parametrize(
    ("lo", "hi", "ticks"),
    [
        (0, 4, [0, 1, 2, 3, 4]),
        (1, 12, [2, 4, 6, 8, 10, 12]),
        (0, 1000, [0, 200, 400, 600, 800, 1000]),
        (3, 3, [3]),
        (0.2, 0.8, [0]),
    ],
)
def test_integer_ticks_are_whole_steps(lo: float, hi: float, ticks: list[int]) -> None:
    assert integer_ticks(lo, hi) == ticks


def test_ticks_thin_out_to_fit_a_narrow_plot() -> None:
    assert ticks_for_width(1, 42, 19) == [20, 40]  # an 80-column dashboard's plot: labels never collide
    assert ticks_for_width(1, 42, 38) == [10, 20, 30, 40]
    assert integer_ticks(41, 59, most=1) == [50]


def test_config_diff_keeps_only_the_keys_that_differ() -> None:
    a = {"train": {"lr": 1e-3, "steps": 200}, "seed": 42, "rewards": [{"name": "x"}]}
    b = {"train": {"lr": 2e-3, "steps": 200}, "seed": 42, "rewards": [{"name": "y"}], "extra": 1}
    assert config_diff({"a": a, "b": b}) == {
        "extra": {"a": None, "b": 1},
        "rewards": {"a": [{"name": "x"}], "b": [{"name": "y"}]},
        "train.lr": {"a": 1e-3, "b": 2e-3},
    }


def test_pull_sends_only_new_bytes_of_a_grown_file_and_a_replaced_file_whole(tmp_path: Path) -> None:
    """The agent's pull run on this machine (LocalTransport) against a host directory in tmp_path."""
    remote = tmp_path / "host"
    d = remote / "runs" / "r1"
    (d / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (d / "run.json").write_text("{}")
    (d / "metrics.jsonl").write_bytes(b"a" * 5000)
    (d / "checkpoints" / "checkpoint-2" / "w.bin").write_bytes(b"w" * 10)
    spec = HostSpec(name="h", address="h", remote_dir=str(remote))
    t, root = LocalTransport("h"), tmp_path / "pulled"
    first = pull_run(t, spec, "r1", root)
    assert sorted(first.new) == ["metrics.jsonl", "run.json"] and first.checkpoints == ("checkpoint-2",)
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b"b" * 100)
    grown = pull_run(t, spec, "r1", root)
    assert (grown.grown, grown.received) == (("metrics.jsonl",), 100)
    (d / "metrics.jsonl").write_bytes(b"c" * 5200)  # replaced (a resume rewrites it): same prefix length
    replaced = pull_run(t, spec, "r1", root)
    assert (replaced.new, replaced.received) == (("metrics.jsonl",), 5200)
    assert (root / "h" / "r1" / "metrics.jsonl").read_bytes() == b"c" * 5200
    ck = pull_run(t, spec, "r1", root, checkpoint="2")
    assert ck.checkpoint == "checkpoint-2" and ck.new == ("checkpoints/checkpoint-2/w.bin",)
    with pytest.raises(RunNotFound, match="no checkpoint-9"):
        pull_run(t, spec, "r1", root, checkpoint="9")
    with pytest.raises(RunNotFound, match="no run at"):
        pull_run(t, spec, "r2", root)


def _record(run_id: str, recipe: str, started: float, exit_code: int | None = 0) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "meta": {"session": "s", "recipe": recipe, "command": "c"},
        "ctime": started,
        "started": str(started),
        "exit_code": None if exit_code is None else str(exit_code),
        "ended": started + 10,
        "summary": {"last_step": 5, "final_reward": started / 1000, "best_reward": 1 - started / 1000},
    }


def test_runs_filters_and_sorts() -> None:
    answer = {
        "now": 500.0,
        "sessions": "",
        "runs": [
            _record("a", "tiny", 100),
            _record("b", "overfit", 200),
            _record("c", "tiny", 300, exit_code=1),
        ],
    }
    infos = infos_from_answer("h", answer)
    assert [i.run_id for i in select(infos)] == ["a", "b", "c"]
    assert [i.run_id for i in select(infos, recipe="ti*")] == ["a", "c"]
    assert [i.run_id for i in select(infos, since=150)] == ["b", "c"]
    assert [i.run_id for i in select(infos, state="failed")] == ["c"]
    assert [i.run_id for i in select(infos, sort="reward")] == ["c", "b", "a"]
    assert [i.run_id for i in select(infos, sort="best")] == ["a", "b", "c"]
    with pytest.raises(UsageError):
        select(infos, sort="colour")


def test_since_takes_an_age_or_a_date() -> None:
    assert parse_since("2d", now=1_000_000.0) == 1_000_000.0 - 2 * 86400
    assert parse_since("90m", now=10_000.0) == 10_000.0 - 5400
    assert parse_since("2026-11-20") < parse_since("2026-11-20 14:00")
    with pytest.raises(UsageError, match="--since 'yesterday'"):
        parse_since("yesterday")


def test_wait_exits_0_only_when_every_run_exited_0() -> None:
    def rec(code: int | None) -> RunRecord:
        return RunRecord("h", "r", "s", None, "c", "finished" if code == 0 else "failed", exit_code=code)

    assert exit_status({"a": rec(0), "b": rec(0)}) == 0
    assert exit_status({"a": rec(3), "b": rec(0)}) == 3
    assert exit_status({"a": rec(None)}) == 1  # killed or lost: no code of its own
    assert exit_status({"a": rec(3), "b": WaitTimeout("x")}) == 124


def test_port_specs() -> None:
    assert parse_port_spec("6006") == PortSpec(6006, 6006)
    assert parse_port_spec("8000:18000") == PortSpec(8000, 18000)
    assert parse_port_spec("8000:0") == PortSpec(8000, 0)
    for bad in ("x", "1:2:3", "0", "-1", "99999"):
        with pytest.raises(UsageError):
            parse_port_spec(bad)


def test_a_desktop_notification_gets_the_message_as_an_argument(tmp_path: Path, monkeypatch) -> None:
    from pippa_ops import notify

    bin_dir, got = tmp_path / "bin", tmp_path / "got"
    bin_dir.mkdir()
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {got}\n')
    (bin_dir / "notify-send").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    assert not notify.desktop("x")  # no desktop session: nothing to show it on
    monkeypatch.setenv("DISPLAY", ":0")
    assert notify.desktop("h1: run r failed (exit 1); `rm -rf` $HOME")
    message = "h1: run r failed (exit 1); `rm -rf` $HOME"
    assert got.read_text().splitlines() == ["--app-name", "pippa", "pippa", message]


# ------------------------------------------------------------------------------------------------ W&B
class StandInRun:
    """The attributes of a wandb.apis.public.Run the listing reads."""

    def __init__(self, i: int) -> None:
        self.id, self.name, self.state = f"id{i}", f"run-{i}", "finished"
        self.url = f"https://wandb.ai/ent/proj/runs/id{i}"
        self.created_at = f"2026-11-2{i}T10:00:00Z"
        self.summary = {
            "reward/mean": 0.1 * i,
            "eval/accuracy": 0.5,
            "_step": 200,
            "_runtime": 3.0,
            "hist": {"_type": "histogram"},
            "note": "ok",
            "nan": float("nan"),
        }


class StandInApi:
    """wandb.Api's runs(path, order=, per_page=) shape: an iterable of runs, newest first."""

    def __init__(self, n: int) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.n = n

    def runs(self, path: str, *, order: str, per_page: int) -> list[StandInRun]:
        self.calls.append((path, order, per_page))
        return [StandInRun(i) for i in range(self.n, 0, -1)]


def test_wandb_listing_reads_runs_and_scalar_summaries_and_matches_pippa_runs() -> None:
    from pippa_ops.runs.reading.wandb_api import list_runs

    api = StandInApi(5)
    runs = list_runs("ent/proj", api=api, limit=3, pippa_ids={"id4": "20261120-100000-tiny-ab12"})
    assert api.calls == [("ent/proj", "-created_at", 3)]
    assert [r.id for r in runs] == ["id5", "id4", "id3"]
    assert runs[1].pippa_run == "20261120-100000-tiny-ab12" and runs[0].pippa_run is None
    assert runs[0].summary == {"reward/mean": 0.5, "eval/accuracy": 0.5, "note": "ok"}
    assert runs[0].to_json()["url"] == "https://wandb.ai/ent/proj/runs/id5"


def test_wandb_errors_and_a_missing_key_are_one_line(tmp_path: Path) -> None:
    from pippa_ops.runs.reading.wandb_api import WandbUnavailable, list_runs

    class Broken:
        def runs(self, path: str, *, order: str, per_page: int) -> list[Any]:
            raise ValueError("Could not find proj\nmore detail")

    with pytest.raises(WandbUnavailable, match=r"^W&B: listing ent/proj failed: Could not find proj$"):
        list_runs("ent/proj", api=Broken())
    make_project(tmp_path)  # a repo without .env
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    argv = [PIPPA, "runs", "--pulled", "--runs-dir", str(tmp_path / "runs"), "--wandb", "ent/proj"]
    p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "needs WANDB_API_KEY" in p.stderr, p.stderr
    p = subprocess.run(
        [*argv[:-1], "not-a-path"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "give ENTITY/PROJECT" in p.stderr


@pytest.mark.network
def test_the_real_wandb_api_lists_a_project() -> None:
    """Opt-in: WANDB_API_KEY and PIPPA_TEST_WANDB_PROJECT (ENTITY/PROJECT with at least one run)."""
    project = os.environ.get("PIPPA_TEST_WANDB_PROJECT")
    if not (os.environ.get("WANDB_API_KEY") and project):
        pytest.skip("set WANDB_API_KEY and PIPPA_TEST_WANDB_PROJECT=ENTITY/PROJECT to list a real project")
    from pippa_ops.runs.reading.wandb_api import list_runs

    runs = list_runs(project, limit=3)
    assert runs and all(r.id and r.url for r in runs)


def test_the_daily_core_loads_no_cli_tui_plotting_or_torch() -> None:
    """The core modules in a fresh interpreter: typer, rich, textual, torch stay out; plotext,
    matplotlib and wandb load only when a plot is drawn or W&B is asked."""
    import sys

    mods = (
        "runs.moving.pull",
        "runs.reading.catalog",
        "runs.reading.curves",
        "runs.reading.compare",
        "runs.reading.wait",
        "runs.reading.plots",
        "runs.reading.wandb_api",
        "transport.forward",
        "notify",
    )
    code = (
        "import sys\n"
        + "".join(f"import pippa_ops.{m}\n" for m in mods)
        + (
            "tops = ('typer', 'rich', 'textual', 'torch', 'plotext', 'matplotlib', 'wandb')\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in tops)))\n"
        )
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == ""


def test_a_reconnect_that_fails_authentication_is_ridden_out_as_a_drop() -> None:
    """A connection that dies during authentication (a host going away mid-handshake) can read as an
    authentication failure: `wait` found its run over that host a
    moment ago, so it notes the failure and tries again instead of giving up with an auth error."""
    import time

    from pippa_ops.errors import AuthFailed, WaitTimeout
    from pippa_ops.hosts.inventory import resolve
    from pippa_ops.runs.reading.wait import wait_run
    from pippa_ops.runs.records.listing import RunRecord

    tries: list[str] = []

    def opener(spec: object) -> Any:
        tries.append("connect")
        raise AuthFailed("t1: authentication failed for u@h: transport shut down or saw EOF")

    rec = RunRecord(
        host="local",
        run_id="20260101-000000-cmd-abcd",
        session="s",
        recipe=None,
        command="x",
        state="running",
    )
    notes: list[str] = []
    with pytest.raises(WaitTimeout):
        wait_run(
            resolve("local"),
            rec,
            deadline=time.monotonic() + 1.0,
            note=notes.append,
            backoff_s=(0.05,),
            opener=opener,
        )
    assert len(tries) >= 2 and all("reconnecting in" in n for n in notes) and notes


def test_compare_sees_the_same_recipe_on_two_homes_and_labels_runs_by_recipe_and_short_id() -> None:
    """recipe_path is absolute on each host: /home/a/pippa/... and /root/pippa/... are one recipe."""
    from pippa_ops.runs.reading.compare import LoadedRun, differing_config, legend_labels
    from pippa_ops.runs.reading.curves import parse_metrics

    def loaded(run_id: str, home: str, lr: float) -> LoadedRun:
        plan = {
            "recipe": "tiny",
            "recipe_path": f"{home}/pippa/recipes/tiny.toml",
            "config": {"train": {"lr": lr}},
        }
        header = {"type": "header", "recipe": "tiny", "config": plan}
        return LoadedRun(run_id, "h", "host", "h:x", parse_metrics((json.dumps(header) + "\n").encode()))

    runs = [
        loaded("20261118-101500-tiny-3fa2", "/home/a", 1e-5),
        loaded("20261118-101510-tiny-91c0", "/root", 2e-5),
    ]
    diff = differing_config(runs)
    assert not any(k.endswith("recipe_path") for k in diff) and any(k.endswith("lr") for k in diff), diff
    assert legend_labels(runs) == {runs[0].run_id: "tiny 3fa2", runs[1].run_id: "tiny 91c0"}
