"""`pippa doctor`'s active checks, run by the host's training python (``python -m
training_core.hardware.doctor_active``): on every GPU at once a bf16 GEMM (TFLOPS), a device-to-device copy
(TB/s), a memory pattern written and verified over most of the free memory, and on multi-GPU hosts an
NCCL all-reduce (bus bandwidth, GB/s). Prints ONE JSON line; the host agent judges the figures
(``pippa_agent.doctor.active``). No GPU: ``{"skipped": "skipped (no GPU)"}``.

``--cpu`` runs the same code on the CPU with tiny sizes (and the all-reduce over gloo): the tests and
the acceptance script's dry mode exercise every measurement without a GPU. ``PIPPA_DOCTOR_FAKE_MEASURE``
names a JSON file printed instead of measuring (the tests' fake-measurement hook; torch not imported).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

FAKE_ENV = "PIPPA_DOCTOR_FAKE_MEASURE"
SLOWDOWN_FIELDS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


@dataclass(frozen=True)
class Sizes:
    """Problem sizes: the GPU's, or the CPU dry run's tiny ones."""

    gemm_n: int = 8192  # (n, n) @ (n, n) bf16: large enough to reach peak on an H100
    copy_bytes: int = 1 << 30  # 1 GiB each way
    mem_share: float = 0.85  # of the free memory, for the pattern write/verify
    chunk_bytes: int = 1 << 30
    allreduce_bytes: int = 256 << 20  # nccl-tests reach the bus bandwidth plateau from ~256 MB
    allreduce_iters: int = 20


CPU_SIZES = Sizes(
    gemm_n=128,
    copy_bytes=4 << 20,
    mem_share=0.0,
    chunk_bytes=4 << 20,
    allreduce_bytes=1 << 20,
    allreduce_iters=3,
)
CPU_MEM_BYTES = 16 << 20


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_tflops(
    torch: Any, device: Any, n: int, seconds: float, timing: threading.Event | None = None
) -> float:
    """Dense bf16 matmul throughput: 2 n^3 flops per product, timed over ``seconds`` after a warm-up
    (``timing`` is set when the timed loop starts)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    _sync(torch, device)
    if timing is not None:
        timing.set()
    iters, start = 0, time.perf_counter()
    while True:
        for _ in range(10):
            torch.mm(a, b)
        iters += 10
        _sync(torch, device)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * n**3 * iters / elapsed / 1e12


def copy_tbs(torch: Any, device: Any, nbytes: int, seconds: float) -> float:
    """Device-to-device copy: bytes read plus bytes written per second (as STREAM's copy counts them)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(torch, device)
    iters, start = 0, time.perf_counter()
    while True:
        for _ in range(5):
            dst.copy_(src)
        iters += 5
        _sync(torch, device)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * nbytes * iters / elapsed / 1e12


def memory_pattern(torch: Any, device: Any, total_bytes: int, chunk_bytes: int) -> tuple[float, int]:
    """Write a distinct pattern into every chunk, then its bitwise inverse, verifying each: ``(GiB, wrong
    values)``. A bad memory cell shows as a value that reads back different."""
    n = max(1, chunk_bytes // 4)
    chunks: list[Any] = []
    try:
        while (len(chunks) + 1) * chunk_bytes <= total_bytes:
            chunks.append(torch.empty(n, dtype=torch.int32, device=device))
    except RuntimeError:  # out of memory a little early: verify what was allocated
        pass
    if not chunks:
        return 0.0, 0
    base = torch.arange(n, dtype=torch.int32, device=device)
    wrong = 0
    for invert in (False, True):
        for k, c in enumerate(chunks):
            c.copy_(base).add_(k * 7919)
            if invert:
                c.bitwise_not_()
        for k, c in enumerate(chunks):
            expect = base + k * 7919
            if invert:
                expect.bitwise_not_()
            wrong += int((c != expect).sum().item())
    _sync(torch, device)
    return len(chunks) * n * 4 / 1024**3, wrong


def slowdowns() -> dict[int, str]:
    """GPU index -> the slowdown reasons active now (nvidia-smi's query; older drivers' names too)."""
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        fields = ",".join(["index", *(f"{prefix}.{f}" for f in SLOWDOWN_FIELDS)])
        try:
            p = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=15,
            )
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if p.returncode == 0:
            out = {}
            for line in p.stdout.splitlines():
                cells = [c.strip() for c in line.split(",")]
                active = [f for f, v in zip(SLOWDOWN_FIELDS, cells[1:], strict=False) if v == "Active"]
                if cells and cells[0].isdigit() and active:
                    out[int(cells[0])] = ", ".join(active)
            return out
    return {}


def per_device(
    torch: Any,
    device: Any,
    sizes: Sizes,
    seconds: float,
    mem_bytes: int,
    timing: threading.Event | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"index": device.index or 0}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        row["name"] = props.name
        torch.cuda.set_device(device)
    else:
        row["name"] = "cpu"
    row["gemm_tflops"] = gemm_tflops(torch, device, sizes.gemm_n, seconds, timing)
    row["copy_tbs"] = copy_tbs(torch, device, sizes.copy_bytes, seconds / 2)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        mem_bytes = int(torch.cuda.mem_get_info(device)[0] * sizes.mem_share)
    row["mem_gib"], row["mem_errors"] = memory_pattern(torch, device, mem_bytes, sizes.chunk_bytes)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _allreduce_worker(
    rank: int, world: int, port: int, backend: str, nbytes: int, iters: int, q: Any
) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(device)
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(x)
        _sync(torch, device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        _sync(torch, device)
        elapsed = time.perf_counter() - start
        if rank == 0:  # nccl-tests' bus bandwidth: algbw x 2(n-1)/n
            q.put(nbytes * iters / elapsed / 1e9 * 2 * (world - 1) / world)
    finally:
        dist.destroy_process_group()


def allreduce_gbs(world: int, backend: str, nbytes: int, iters: int) -> float:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(
        _allreduce_worker,
        args=(world, port, backend, nbytes, iters, q),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    return float(q.get())


def _allreduce_retried(world: int, backend: str, sizes: Sizes, tries: int = 3) -> float:
    """``allreduce_gbs``, again on a new port when a start fails: the free port it picked can be taken
    by another process before the ranks bind it (a busy host, or tests side by side)."""
    for left in range(tries - 1, -1, -1):
        try:
            return allreduce_gbs(world, backend, sizes.allreduce_bytes, sizes.allreduce_iters)
        except Exception:
            if not left:
                raise
    raise AssertionError("unreachable")


def measure(seconds: float, cpu: bool) -> dict[str, Any]:
    import torch

    if not cpu and not torch.cuda.is_available():
        return {"skipped": "skipped (no GPU)"}
    sizes = CPU_SIZES if cpu else Sizes()
    devices = (
        [torch.device("cpu")] if cpu else [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    )
    rows: list[dict[str, Any]] = [{} for _ in devices]
    errors: list[str] = []
    timing = [threading.Event() for _ in devices]

    def one(k: int) -> None:
        try:
            rows[k] = per_device(torch, devices[k], sizes, seconds, CPU_MEM_BYTES, timing[k])
        except Exception as e:
            errors.append(f"GPU {k}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            rows[k] = {"index": k, "error": errors[-1]}
        finally:
            timing[k].set()  # a GPU that failed early does not hold up the sampling

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(devices))]  # all GPUs at once
    for t in threads:
        t.start()
    throttled: dict[int, str] = {}
    if not cpu:  # sample the slowdown reasons halfway through the GEMMs' timed loops
        deadline = time.monotonic() + 60
        for event in timing:
            event.wait(max(0.0, deadline - time.monotonic()))
        time.sleep(seconds / 2)
        throttled = slowdowns()
    for t in threads:
        t.join()
    for row in rows:
        if row.get("index") in throttled:
            row["throttled"] = throttled[row["index"]]
    out: dict[str, Any] = {"gpus": rows, "torch": torch.__version__}
    world = 2 if cpu else len(devices)
    if world > 1:
        try:
            out["allreduce_gbs"] = _allreduce_retried(world, "gloo" if cpu else "nccl", sizes)
        except Exception as e:
            out["allreduce_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per timed measurement")
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (tests, dry runs)")
    args = ap.parse_args(argv)
    fake = os.environ.get(FAKE_ENV)
    if fake:
        with open(fake) as f:
            out = json.load(f)
    else:
        out = measure(args.seconds, args.cpu)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
