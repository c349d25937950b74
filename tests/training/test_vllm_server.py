"""vLLM server mode's orchestration on the CPU: the GPU split, the server and trainer command lines, and
the supervisor run for real with stand-in processes (a small HTTP server answering ``/health`` like
``trl vllm-serve``, a trainer that records the signals it gets). The real server is for GPU hosts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from training_core import launch
from training_core.config import LaunchConfig
from training_core.errors import BadSetting
from training_core.generation import vllm_server
from training_core.hardware.platform import PlatformFacts

REPO = Path(__file__).resolve().parents[2]
H100x8 = PlatformFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8, gpu_memory_gb=80, bf16=True)

# health_after: seconds before /health answers (-1: never listens); die_after: exit after that long.
STAND_IN_SERVER = textwrap.dedent("""
    import http.server, sys, threading, time, os
    port, health_after, die_after = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    print("stand-in vllm-serve on GPUs", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
    if die_after >= 0:
        threading.Timer(die_after, lambda: os._exit(7)).start()
    if health_after < 0:
        time.sleep(3600)
    time.sleep(health_after)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")
# Writes "started", then waits for its exit status file or a signal ("got <signum>", exit 130).
STAND_IN_TRAINER = textwrap.dedent("""
    import os, signal, sys, time
    d = sys.argv[1]
    def on(sig, frame):
        open(os.path.join(d, "trainer.signal"), "w").write(str(sig))
        sys.exit(130)
    signal.signal(signal.SIGINT, on)
    signal.signal(signal.SIGTERM, on)
    open(os.path.join(d, "trainer.started"), "w").write(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    code = os.path.join(d, "trainer.exit")
    while not os.path.exists(code):
        time.sleep(0.05)
    sys.exit(int(open(code).read()))
""")


def test_the_team_layout_trains_on_seven_gpus_and_serves_on_the_eighth() -> None:
    split = vllm_server.split_gpus(LaunchConfig(processes=7, gpus="0-7", vllm_gpus="7"), 8)
    assert (split.train, split.serve, split.tensor_parallel) == ([0, 1, 2, 3, 4, 5, 6], [7], 1)
    split = vllm_server.split_gpus(LaunchConfig(processes=4, vllm_gpus="4-7", vllm_tensor_parallel=2), 8)
    assert (split.train, split.serve, split.tensor_parallel) == ([0, 1, 2, 3], [4, 5, 6, 7], 2)


@pytest.mark.parametrize(
    ("cfg", "why"),
    [
        (LaunchConfig(), "needs launch.vllm_gpus"),
        (LaunchConfig(gpus="0-3", vllm_gpus="7"), "not within the run's GPUs"),
        (LaunchConfig(gpus="0", vllm_gpus="0"), "no GPU left for training"),
        (LaunchConfig(processes=8, vllm_gpus="7"), "7 GPU"),
        (LaunchConfig(vllm_gpus="5-7", vllm_tensor_parallel=2), "does not divide"),
    ],
)
def test_a_split_that_cannot_work_is_one_clear_error(cfg: LaunchConfig, why: str) -> None:
    with pytest.raises(BadSetting, match=why):
        vllm_server.split_gpus(cfg, 8)


def test_launch_prints_the_server_on_its_gpus_and_the_trainer_on_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [
        "train.use_vllm=true",
        'train.vllm_mode="server"',
        'launch.vllm_gpus="7"',
        "launch.processes=7",
        'launch.vllm_args=["--max-model-len", "8192"]',
        "launch.vllm_port=8123",
    ]
    argv = ["baseline", "--run-dir", str(tmp_path), "--print"]
    for s in sets:
        argv += ["--set", s]
    assert launch.main(argv, facts=H100x8) == 0
    serve, train = capsys.readouterr().out.splitlines()
    assert serve.startswith("CUDA_VISIBLE_DEVICES=7 ")
    assert " vllm-serve --model Qwen/Qwen2-0.5B-Instruct " in serve
    assert "--tensor-parallel-size 1 --host 127.0.0.1 --port 8123 --max-model-len 8192" in serve
    assert "accelerate.commands.launch" in train
    assert "gpu_ids: '0,1,2,3,4,5,6'" in (tmp_path / "accelerate.yaml").read_text()


def test_the_trainer_is_pointed_at_the_server_it_waited_for() -> None:
    from training_core.methods.trainer import grpo_args
    from training_core.recipes import resolve

    res = resolve(
        "tiny",
        [
            "train.use_vllm=true",
            'train.vllm_mode="server"',
            "launch.vllm_port=8123",
            "launch.vllm_timeout_s=99",
        ],
        PlatformFacts(),
    )
    args = grpo_args(res.config, Path("/tmp/x"), ["none"], "x")
    assert (args.vllm_mode, args.vllm_server_host, args.vllm_server_port) == ("server", "127.0.0.1", 8123)
    assert args.vllm_server_timeout == 99


# --- the supervisor, with stand-ins ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sides:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, _free_port()
        (tmp / "server.py").write_text(STAND_IN_SERVER)
        (tmp / "trainer.py").write_text(STAND_IN_TRAINER)
        self.lines: list[str] = []

    def run(self, health_after: float, die_after: float = -1, timeout_s: float = 20) -> int:
        serve = [
            sys.executable,
            str(self.tmp / "server.py"),
            str(self.port),
            str(health_after),
            str(die_after),
        ]
        train = [sys.executable, str(self.tmp / "trainer.py"), str(self.tmp)]
        return vllm_server.supervise(
            serve,
            {**os.environ, "CUDA_VISIBLE_DEVICES": "7"},
            train,
            {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"},
            f"http://127.0.0.1:{self.port}/health",
            self.tmp / "vllm.log",
            timeout_s,
            self.lines.append,
            stop_grace_s=5,
        )

    def file(self, name: str) -> str | None:
        p = self.tmp / name
        return p.read_text() if p.exists() else None


def _server_gone(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_training_starts_once_the_server_is_healthy_and_the_server_stops_with_it(tmp_path: Path) -> None:
    sides = Sides(tmp_path)
    (tmp_path / "trainer.exit").write_text("0")  # the stand-in trainer finishes at once
    assert sides.run(health_after=1.0) == 0
    assert sides.file("trainer.started") == "0,1"  # the training GPUs, not the server's
    assert "stand-in vllm-serve on GPUs 7" in (sides.file("vllm.log") or "")
    assert _server_gone(sides.port)
    assert any("healthy" in line for line in sides.lines)


def test_a_server_that_never_becomes_healthy_fails_the_run_before_training(tmp_path: Path) -> None:
    sides = Sides(tmp_path)
    t0 = time.monotonic()
    assert sides.run(health_after=-1, timeout_s=1.5) == 1
    assert time.monotonic() - t0 < 10 and sides.file("trainer.started") is None
    assert any("not healthy within 2 s" in line for line in sides.lines)


def test_a_server_that_dies_during_training_stops_the_trainer_and_fails_the_run(tmp_path: Path) -> None:
    sides = Sides(tmp_path)
    assert sides.run(health_after=0.2, die_after=3) == 1
    assert sides.file("trainer.started") is not None
    assert sides.file("trainer.signal") == str(int(signal.SIGINT))  # it could save its checkpoint
    assert any("exited (status 7) during training" in line for line in sides.lines)


def test_a_failing_trainer_fails_the_run_and_stops_the_server(tmp_path: Path) -> None:
    sides = Sides(tmp_path)
    (tmp_path / "trainer.exit").write_text("3")
    assert sides.run(health_after=0.2) == 3
    assert _server_gone(sides.port)


def test_a_stop_signal_reaches_the_trainer_then_the_server_stops(tmp_path: Path) -> None:
    sides = Sides(tmp_path)
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from training_core.generation.vllm_server import supervise
        tmp = Path({str(tmp_path)!r})
        serve = [sys.executable, str(tmp / "server.py"), "{sides.port}", "0.2", "-1"]
        train = [sys.executable, str(tmp / "trainer.py"), str(tmp)]
        sys.exit(supervise(serve, dict(os.environ), train, dict(os.environ),
                           "http://127.0.0.1:{sides.port}/health", tmp / "vllm.log", 20, stop_grace_s=5))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while sides.file("trainer.started") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C in the run's tmux window (pippa stop) sends
    assert proc.wait(20) == 130
    assert sides.file("trainer.signal") == str(int(signal.SIGINT))
    assert _server_gone(sides.port)
