"""Deterministic dashboard state for Pilot and snapshot tests (no clock, no network)."""

from __future__ import annotations

from pippa_ops.monitor.host import (
    Gpu,
    GpuSampled,
    HostState,
    LinkChanged,
    RunDetail,
    RunRow,
    RunsListed,
    apply,
)

__all__ = ["apply"]

HOSTS = ("gpu-a", "gpu-b", "local")
FAILED_RUN = "20260101-100000-overfit-ef56"
# A reason as long as real ones get (an SSH library's messages): the status line must show all of it.
DOWN_REASON = "SSH handshake failed: Error reading SSH protocol banner[Errno 104] Connection reset by peer"


def _h100(index: int, util: float, used: float) -> Gpu:
    return Gpu(index, "NVIDIA H100 80GB HBM3", util, used, 81559.0, 40 + util / 4, 70 + util * 3)


def host_a() -> HostState:
    state = HostState("gpu-a")
    for t in range(20):  # twenty samples give the sparklines a shape
        u = (t * 7) % 100
        sample = (_h100(0, u, 20000 + t * 1500), _h100(1, 100 - u, 60000))
        state = apply(state, GpuSampled("gpu-a", sample, 1e9 + t))
    return apply(state, runs_listed("gpu-a"))


def runs_listed(host: str) -> RunsListed:
    return RunsListed(
        host,
        (
            RunRow("20260101-120000-tiny-ab12", "tiny", "running", "tiny-ab12", 42, 0.375, 754.0),
            RunRow(
                "20260101-110000-cmd-cd34", "echo hello", "finished (exit 0)", "training", None, None, 3.0
            ),
            RunRow(FAILED_RUN, "overfit", "failed (exit 1)", "sweep", 7, -0.5, 3725.0),
        ),
    )


def host_b() -> HostState:
    return apply(HostState("gpu-b"), LinkChanged("gpu-b", "down", DOWN_REASON, 8.0))


def host_local() -> HostState:
    return apply(HostState("local"), GpuSampled("local", (), None, "no GPU (nvidia-smi not found)"))


def states() -> dict[str, HostState]:
    return {"gpu-a": host_a(), "gpu-b": host_b(), "local": host_local()}


def detail() -> RunDetail:
    steps = range(1, 43)
    return RunDetail(
        host="gpu-a",
        run_id="20260101-120000-tiny-ab12",
        series={
            "reward/mean": tuple((s, -1 + s / 30) for s in steps),
            "loss/total": tuple((s, 0.5 / s) for s in steps),
            "completions/mean_length": tuple((s, 40 + (s % 7)) for s in steps),
            "grad/norm": tuple((s, 1.0 + (s % 5) / 10) for s in steps),
        },
        evals={"eval/accuracy": ((10, 0.1), (20, 0.3), (40, 0.375))},
        wandb_url="https://wandb.ai/team/pippa/runs/ab12",
        has_metrics=True,
        log_tail=tuple(f"step {s}: reward {-1 + s / 30:.3f}" for s in range(30, 43)),
    )


def host_eight() -> HostState:
    """An 8-GPU host (the first-hour test: at 80x24 its runs must stay in view)."""
    state = HostState("gpu-8")
    for t in range(12):
        sample = tuple(_h100(i, (t * 7 + i * 13) % 100, 20000 + i * 7000) for i in range(8))
        state = apply(state, GpuSampled("gpu-8", sample, 1e9 + t))
    return apply(state, runs_listed("gpu-8"))


EIGHT_HOSTS = ("gpu-8", "local")


def eight_states() -> dict[str, HostState]:
    return {"gpu-8": host_eight(), "local": host_local()}


LONG_STATE = "failed after 3 attempts (exit 1)"  # the longest state a run list shows (issue 32)


def eight_long_states() -> dict[str, HostState]:
    """The 8-GPU host with a priced run in a long state above the running one (it is the newest)."""
    long = RunRow("20260101-130000-tiny-ab99", "tiny", LONG_STATE, "tiny-ab99", 40, 0.5, 3725.0, 12.345, "$")
    states = eight_states()
    states["gpu-8"] = apply(states["gpu-8"], RunsListed("gpu-8", (long, *runs_listed("gpu-8").runs)))
    return states


def eight_detail() -> RunDetail:
    """The running run's curves on the 8-GPU host."""
    from dataclasses import replace

    return replace(detail(), host="gpu-8")
