"""The dashboard's core without a terminal: parsers, reducer, and a HostMonitor on the host ``local``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import fake_smi
import monitor_loop
import pytest

from pippa_agent.doctor.history import store
from pippa_ops.dash.fleet import fleet_row
from pippa_ops.hosts.inventory import local_spec
from pippa_ops.monitor.host import HostMonitor, RunUpdated
from pippa_ops.monitor.state import (
    HISTORY,
    DoctorRead,
    Gpu,
    GpuSampled,
    HostState,
    LinkChanged,
    LogTail,
    MetricsParser,
    RunsListed,
    apply,
)

URL = "https://wandb.ai/a/b/runs/x"


def _lines(*records: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_metrics_parser_waits_for_the_newline_of_a_partial_line() -> None:
    p = MetricsParser()
    data = _lines(
        {"type": "header", "run_id": "r", "wandb": {"id": "x", "url": URL, "mode": "online"}},
        {"type": "step", "step": 1, "time": 1.0, "reward/mean": -0.5, "loss/total": 0.1, "grad/norm": 2.0},
        {"type": "eval", "step": 1, "time": 1.0, "eval/accuracy": 0.25, "eval/n": 4},
        {"type": "step", "step": 2, "time": 2.0, "reward/mean": 0.5, "completions/mean_length": 3},
    )
    cut = len(data) - 10  # the last step line arrives in two reads
    p.feed(data[:cut])
    assert p.series["reward/mean"] == [(1, -0.5)]
    p.feed(data[cut:])
    assert p.series["reward/mean"] == [(1, -0.5), (2, 0.5)]
    assert p.series["completions/mean_length"] == [(2, 3.0)]
    assert p.evals == {"eval/accuracy": [(1, 0.25)]}  # eval/n is a count, not a curve
    assert p.wandb_url == URL
    p.feed(b"not json\n" + _lines({"type": "end", "status": "completed", "step": 2, "time": 3.0}))
    d = p.detail("h", "r", ())
    assert d.end_status == "completed" and d.has_metrics


def test_metrics_parser_shows_one_point_per_step_across_a_resume_that_replaced_the_file() -> None:
    header = {"type": "header", "run_id": "r", "resumed_from_step": None}

    def step(s: int, reward: float) -> dict:
        return {"type": "step", "step": s, "reward/mean": reward}

    killed = _lines(
        header, step(1, 0.1), step(2, 0.2), step(3, 0.3), {"type": "eval", "step": 3, "eval/accuracy": 0.5}
    )
    resumed = _lines({**header, "resumed_from_step": 2}, step(3, 0.9), step(4, 1.0))
    # A follower that saw the killed run's lines, then the resumed header appended (file not replaced):
    appended = MetricsParser()
    appended.feed(killed + resumed)
    # tail -F after the resume replaced the file: the new file again from byte 0, after the old lines.
    replaced = MetricsParser()
    replaced.feed(killed + _lines(header, step(1, 0.1), step(2, 0.2)) + resumed)
    # A reconnect reads from 0 again; the partial line of the dropped stream must not eat the header.
    reread = MetricsParser()
    reread.feed(killed + b'{"type": "st')
    reread.restart()
    reread.feed(_lines(header, step(1, 0.1), step(2, 0.2)) + resumed)
    for p in (appended, replaced, reread):
        assert p.series["reward/mean"] == [(1, 0.1), (2, 0.2), (3, 0.9), (4, 1.0)]
        assert p.evals == {} and p.last_step == 4 and p.end_status is None


def test_log_tail_keeps_the_last_lines_and_the_last_state_of_a_progress_bar() -> None:
    t = LogTail(keep=3)
    t.feed(b"a\nb\nc\n 10%\r 50%\r100%\nd\npart")
    assert t.tail() == ("c", "100%", "d", "part")  # three complete lines, then the unfinished one


def test_gpu_history_is_capped_and_a_down_event_keeps_the_gpus() -> None:
    s = HostState("h")
    for i in range(HISTORY + 5):
        s = apply(s, GpuSampled("h", (Gpu(0, "G", float(i), 1.0, 2.0, 30.0, 100.0),), float(i)))
    assert s.gpus is not None and len(s.gpus[0].util_history) == HISTORY
    assert s.gpus[0].util_history[-1] == HISTORY + 4
    s = apply(s, LinkChanged("h", "down", "connection refused", 2))
    assert s.link == "down" and s.gpus is not None


def test_local_host_streams_gpus_lists_runs_and_follows_a_runs_metrics(tmp_path: Path, monkeypatch) -> None:
    """The host ``local`` goes through the same monitor as SSH hosts (LocalTransport)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(fake_smi.script(gpus=2))
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    run_id = "20260101-000000-tiny-abcd"
    run_dir = tmp_path / "repo" / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "session": "gone",
                "host": "local",
                "recipe": "tiny",
                "command": "x",
                "argv": [],
                "started": time.time(),
                "sync": None,
                "sweep_index": 0,
                "sweep_size": 1,
            }
        )
    )
    (run_dir / "output.log").write_text("hello from the job\n")
    (run_dir / "metrics.jsonl").write_bytes(
        _lines(
            {"type": "header", "run_id": run_id, "wandb": None},
            {"type": "step", "step": 1, "time": 1.0, "reward/mean": 0.25},
        )
    )
    (run_dir / "exit_code").write_text("0\n")
    doctor_time = time.time() - 3 * 3600
    store(str(tmp_path / "repo"), {"host": "local", "verdict": "warn", "time": doctor_time, "checks": []})

    events: list[object] = []
    got = threading.Condition()

    def emit(e: object) -> None:
        with got:
            events.append(e)
            got.notify_all()

    def wait_for(pred, what: str, timeout: float = 20) -> object:
        with got:
            ok = got.wait_for(lambda: next((e for e in events if pred(e)), None), timeout)
        assert ok, f"no event: {what}; got {events[-5:]}"
        return next(e for e in events if pred(e))

    mon = HostMonitor(local_spec(tmp_path / "repo"), interval_s=1.0, runs_every_s=0.5)
    ended = monitor_loop.start(mon, emit)
    try:
        g = wait_for(lambda e: isinstance(e, GpuSampled) and e.gpus, "a GPU sample")
        assert [r.index for r in g.gpus] == [0, 1] and g.gpus[0].mem_total_mib == 81559.0
        runs = wait_for(lambda e: isinstance(e, RunsListed) and e.runs, "the run list")
        doc = wait_for(lambda e: isinstance(e, DoctorRead), "the last doctor verdict")
        assert (doc.verdict, doc.time) == ("warn", doctor_time)
        assert " warn 3h " in fleet_row(apply(HostState("local"), doc), 120).plain
        assert runs.runs[0].run_id == run_id and runs.runs[0].what == "tiny"
        mon.select(run_id)
        follower = threading.Thread(target=mon.follow, args=(run_id, emit), daemon=True)
        follower.start()
        upd = wait_for(
            lambda e: isinstance(e, RunUpdated) and e.detail.series.get("reward/mean") and e.detail.log_tail,
            "the run's metrics and log",
        )
        assert upd.detail.series["reward/mean"] == ((1, 0.25),)
        assert upd.detail.log_tail == ("hello from the job",)
        follower.join(10)
        assert not follower.is_alive(), "a finished run's follow ends by itself"
    finally:
        mon.close()
    assert ended.wait(10), "close() ends the monitor's loops"


@pytest.mark.parametrize("module", ["pippa_ops.monitor.host", "pippa_ops.monitor.state"])
def test_core_imports_no_tui(module: str) -> None:
    import subprocess
    import sys

    code = (
        f"import sys, {module}; "
        "bad = [m for m in ('textual', 'rich', 'typer') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_dashboard_draws_gpu_gpu_the_one_gpu_type_and_indexes_unnumbered_ones() -> None:
    import pippa_ops.monitor.state as ms
    from pippa_ops import gpu
    from pippa_ops.monitor.host import indexed

    assert not hasattr(ms, "GpuReading") and ms.GpuState.__annotations__["reading"] in ("Gpu", gpu.Gpu)
    g = gpu.Gpu(None, "T4", 50.0, 10.0, 40.0)
    s = apply(HostState("h"), GpuSampled("h", (indexed(g, 3),), 1.0))
    assert s.gpus is not None and s.gpus[0].reading.index == 3 and s.gpus[0].mem_history == (25.0,)


def test_a_host_out_of_view_restarts_its_gpu_stream_slower_on_the_same_link(
    tmp_path: Path, monkeypatch
) -> None:
    """set_visible(False): the feed (a task on the loop) ends nvidia-smi's loop and starts it at the slow
    rate on the same connection (the host never reads down); back in view: the full rate again."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(fake_smi.script(gpus=1))
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    (tmp_path / "repo").mkdir()
    events: list[object] = []
    mon = HostMonitor(local_spec(tmp_path / "repo"), interval_s=1.0, runs_every_s=0.5)

    def loops() -> list[str]:
        out = subprocess.run(["pgrep", "-af", str(bin_dir)], capture_output=True, text=True).stdout
        return sorted(line.split(" -l ")[-1] for line in out.splitlines() if " -l " in line)

    def until(pred, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 20
        while not pred():
            assert time.monotonic() < deadline, f"{what}; nvidia-smi loops: {loops()}"
            time.sleep(0.1)

    ended = monitor_loop.start(mon, events.append)
    try:
        until(lambda: any(isinstance(e, GpuSampled) and e.gpus for e in events), "a first sample")
        until(lambda: loops() == ["1"], "nvidia-smi -l 1")
        mon.set_visible(False)
        until(lambda: loops() == ["8"], "only nvidia-smi -l 8 once out of view")
        assert mon.interval_s == 8.0 and mon.runs_every_s == 15.0
        mon.set_visible(True)
        until(lambda: loops() == ["1"], "only nvidia-smi -l 1 back in view")
        links = [e.link for e in events if isinstance(e, LinkChanged)]
        assert "down" not in links, f"the link stayed up through both restarts: {links}"
    finally:
        mon.close()
    assert ended.wait(10), "close() ends the monitor's loops"
    until(lambda: loops() == [], "no nvidia-smi left after close()")
