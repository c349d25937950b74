"""vLLM server mode: generation on GPUs of its own (``trl vllm-serve``), training on the rest.

A recipe with ``train.use_vllm = true``, ``train.vllm_mode = "server"`` and ``launch.vllm_gpus`` (e.g.
the team's 8-GPU layout: ``launch.gpus = "0-7"``, ``vllm_gpus = "7"``, ``processes = 7``) makes
``training_core.launch`` supervise two processes instead of exec'ing one: first the server on its GPUs
(output in ``vllm.log``), then, once ``GET /health`` answers 200, the training launch on the other GPUs
(TRL's ``vllm_mode="server"`` client, pointed at the server by ``grpo_args``). Either side failing fails
the run: a server that dies or never becomes healthy within ``launch.vllm_timeout_s`` stops the
trainer (SIGINT: it saves its checkpoint) and the launch exits 1; a trainer that ends stops the server
and the launch exits with the trainer's status. SIGINT/SIGTERM to the launch goes to the trainer
first, then the server is stopped. The supervisor is a plain child-process loop, so it runs the same
in a tmux session and inside a SLURM job. Torch-free (stdlib only).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from training_core.config import LaunchConfig
from training_core.errors import BadSetting
from training_core.hardware.gpu_ids import parse_gpus

STOP_GRACE_S = 30.0  # a stopped process gets this long after SIGTERM before SIGKILL


@dataclass(frozen=True)
class GpuSplit:
    train: list[int]  # CUDA_VISIBLE_DEVICES of the training ranks
    serve: list[int]  # CUDA_VISIBLE_DEVICES of the vLLM server
    tensor_parallel: int


def split_gpus(launch: LaunchConfig, gpu_count: int) -> GpuSplit:
    """The server's GPUs out of the run's (``launch.gpus``, else every GPU); the rest train."""
    pool = parse_gpus(launch.gpus) or list(range(gpu_count))
    serve = parse_gpus(launch.vllm_gpus)
    if not serve:
        raise BadSetting('train.vllm_mode = "server" needs launch.vllm_gpus, the GPUs of the vLLM server')
    outside = [g for g in serve if g not in pool]
    if outside:
        raise BadSetting(f"launch.vllm_gpus {launch.vllm_gpus} is not within the run's GPUs {pool}")
    train = [g for g in pool if g not in serve]
    if not train:
        raise BadSetting("no GPU left for training: launch.vllm_gpus takes every GPU of the run")
    if launch.processes > len(train):
        raise BadSetting(f"launch.processes={launch.processes} but {len(train)} GPU(s) left for training")
    tp = launch.vllm_tensor_parallel or len(serve)
    if tp > len(serve) or len(serve) % tp:
        raise BadSetting(f"launch.vllm_tensor_parallel={tp} does not divide the {len(serve)} server GPU(s)")
    return GpuSplit(train, serve, tp)


def serve_argv(python: str, model: str, tensor_parallel: int, port: int, extra: list[str]) -> list[str]:
    """``trl vllm-serve`` (the console script beside ``python``) on 127.0.0.1 only: the trainer runs on
    the same host, and nothing else should reach an unauthenticated weight-sync endpoint."""
    trl = str(Path(python).with_name("trl"))
    return [
        trl,
        "vllm-serve",
        "--model",
        model,
        "--tensor-parallel-size",
        str(tensor_parallel),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(
    url: str, server: subprocess.Popen[bytes], timeout_s: float, poll_s: float = 0.5
) -> str | None:
    """None once ``url`` answers 200; otherwise why not (the server exited, or the time ran out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            return f"the vLLM server exited with status {server.returncode} before it was healthy"
        if healthy(url):
            return None
        if time.monotonic() >= deadline:
            return f"the vLLM server was not healthy within {timeout_s:.0f} s ({url})"
        time.sleep(poll_s)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> int:
    """Signal a child's process group, wait up to ``grace_s``, then kill the group; its status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return int(proc.returncode)


def supervise(
    serve: list[str],
    serve_env: dict[str, str],
    train: list[str],
    train_env: dict[str, str],
    health_url: str,
    log: Path,
    timeout_s: float,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    stop_grace_s: float = STOP_GRACE_S,
) -> int:
    """Run the server, wait for its health, run the trainer; the run's exit status (see the module)."""
    with log.open("ab") as out:
        server = subprocess.Popen(
            serve, env=serve_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    trainer: subprocess.Popen[bytes] | None = None
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        if trainer is not None and trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        say(f"vllm: starting the server ({' '.join(serve[:2])}, log {log.name}), waiting for {health_url}")
        why = wait_healthy(health_url, server, timeout_s)
        if why or stopping:
            say(f"vllm: {why or 'stopped before training started'}; the run does not start")
            return 1 if why else 130
        say("vllm: the server is healthy; starting training")
        # the trainer leads its own process group: a signal for the whole run reaches it through us
        trainer = subprocess.Popen(train, env=train_env, start_new_session=True)
        while trainer.poll() is None:
            if server.poll() is not None:
                say(f"vllm: the server exited (status {server.returncode}) during training; stopping the run")
                stop(trainer, signal.SIGINT, stop_grace_s)
                return 1
            time.sleep(0.2)
        return int(trainer.returncode)
    finally:
        if trainer is not None:
            stop(trainer, signal.SIGTERM, stop_grace_s)
        stop(server, signal.SIGTERM, stop_grace_s)
        for s, h in old.items():
            signal.signal(s, h)
