"""`pippa doctor`: what its checks cost against gathering the same facts by hand.

    .venv/bin/python bench/bench_doctor.py [--repeat 3]          # passive doctor over loopback hosts
    python3 bench/bench_doctor.py --gemm [--cpu] [--json FILE]  # on a GPU: the active GEMM's overhead

1. Passive (``--quick``) doctor over 1 and 8 loopback sshd hosts (tests/sshd.py, each with the tests'
   fake nvidia-smi answering ``-q -x`` from the 8 x H100 fixture and a fake dmesg), one ``pippa doctor
   --quick --json`` for all of them, side by side with the same facts gathered by hand: one
   ``ssh HOST 'nvidia-smi -q -x; dmesg'`` per host, all hosts at once. Goal: ratio <= 1.2x. Then 1 host
   over kept connections on both sides (pippa's keeper, OpenSSH's ControlPersist), and, on one connection
   already open (so without the CLI's start and the SSH handshake), the doctor request against the
   by-hand commands, with and without its torch-facts cache: what the host side itself costs.
2. ``--gemm``: the doctor's bf16 GEMM figure (training_core.hardware.doctor_active.gemm_tflops) against a bare
   ``torch.mm`` loop of the same shape timed with CUDA events. Goal: >= 0.95x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def gemm_overhead(cpu: bool, seconds: float) -> dict[str, float]:
    import torch

    from training_core.hardware import doctor_active as da

    if not cpu and not torch.cuda.is_available():
        raise SystemExit("bench_doctor --gemm: no CUDA GPU here (pass --cpu for the dry run)")
    device = torch.device("cpu") if cpu else torch.device("cuda", 0)
    n = 128 if cpu else da.Sizes().gemm_n
    doctor = da.gemm_tflops(torch, device, n, seconds)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    iters = max(10, int(doctor * 1e12 * seconds / (2 * n**3)))  # about as long as the doctor's loop
    if cpu:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.mm(a, b)
        elapsed = time.perf_counter() - t0
    else:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            torch.mm(a, b)
        end.record()
        torch.cuda.synchronize()
        elapsed = start.elapsed_time(end) / 1000
    bare = 2.0 * n**3 * iters / elapsed / 1e12
    return {"n": n, "doctor_tflops": doctor, "bare_tflops": bare, "ratio": doctor / bare}


def passive(repeat: int) -> list[dict[str, float]]:
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "doctor"))
    from _common import PIPPA, client_copy, start_world
    from doctor_fixtures import host_env, install_fakes, make_case

    world = start_world("bench_doctor", 8)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = client_copy(world, Path(tmp) / "client")
            inventory = Path(tmp) / "client" / ".config" / "pippa" / "hosts.toml"
            text = inventory.read_text()
            for h in world.hosts:  # a clean 8 x H100 box each: fakes, the fake torch, the active program
                case = make_case("clean")
                fake = install_fakes(h, case)
                env_line = ", ".join(f"{k} = {json.dumps(v)}" for k, v in host_env(fake, case).items())
                head = f"[hosts.{h.name}]\n"
                text = text.replace(head, f"{head}gpus = 8\nenv = {{ {env_line} }}\n")
                code = h.home / "pippa" / "training_core"
                (code / "hardware").mkdir(parents=True)
                for name in ("__init__.py", "hardware/__init__.py", "hardware/doctor_active.py"):
                    (code / name).write_text((ROOT / "training_core" / name).read_text())
                subprocess.run(["chown", "-R", h.user, str(h.home / "pippa")], check=True)
            inventory.write_text(text)
            for n in (1, 8):
                names = [h.name for h in world.hosts[:n]]
                aliases = [h.ssh_alias for h in world.hosts[:n]]
                doc, hand = [], []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    p = subprocess.run(
                        [PIPPA, "doctor", "--quick", "--json", *names],
                        env=env,
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                        timeout=300,
                    )
                    doc.append(time.perf_counter() - t0)
                    if p.returncode not in (0, 1) or len(json.loads(p.stdout)) != n:
                        raise SystemExit(f"pippa doctor failed: {p.stdout[-500:]} {p.stderr[-500:]}")
                    t0 = time.perf_counter()
                    procs = [
                        subprocess.Popen(
                            [
                                "ssh",
                                "-F",
                                str(Path(tmp) / "client" / ".ssh" / "config"),
                                "-o",
                                "UserKnownHostsFile=" + str(Path(tmp) / "client" / ".ssh" / "known_hosts"),
                                a,
                                "nvidia-smi -q -x; dmesg",
                            ],
                            env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL,
                        )
                        for a in aliases
                    ]
                    outs = [p.communicate(timeout=120)[0] for p in procs]
                    hand.append(time.perf_counter() - t0)
                    if not all(b"<nvidia_smi_log>" in o for o in outs):
                        raise SystemExit("by hand: nvidia-smi -q -x gave no XML")
                d, h = statistics.median(doc), statistics.median(hand)
                rows.append({"hosts": n, "doctor_s": d, "by_hand_s": h, "ratio": d / h})
                print(
                    f"{n} host(s): pippa doctor --quick {d:.2f}s, by hand (ssh nvidia-smi -q -x; dmesg) "
                    f"{h:.2f}s, ratio {d / h:.2f}x (goal <= 1.2x)"
                )
            names = [h.name for h in world.hosts[:4]]
            for mode in (["--quick"], []):  # the bound: 4 hosts <= 60 s, --quick <= 5 s
                t0 = time.perf_counter()
                p = subprocess.run(
                    [PIPPA, "doctor", *mode, "--json", *names],
                    env=env,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                took = time.perf_counter() - t0
                what = "pippa doctor " + (" ".join(mode) or "(full: passive + active, fake GPU figures)")
                print(f"4 hosts: {what}: {took:.2f}s (exit {p.returncode})")
                rows.append({"hosts": 4, "full": not mode, "doctor_s": took})
            rows.append(warm(world.hosts[0], Path(tmp), env, repeat))
            rows.append(in_process(world.hosts[0], Path(tmp) / "client", repeat))
    finally:
        world.close()
    return rows


def warm(h: object, tmp: Path, env: dict[str, str], repeat: int) -> dict[str, float]:
    """1 host over a kept connection on both sides: pippa's connection keeper (the CLI's default) against
    OpenSSH with ControlMaster/ControlPersist, each warmed by one call first."""
    import os

    from _common import PIPPA

    from pippa_ops.transport import reuse

    kept = {k: v for k, v in env.items() if k != "PIPPA_NO_REUSE"}
    kept["PIPPA_RUNTIME_DIR"] = str(tmp / "run")
    control = ["-o", "ControlMaster=auto", "-o", f"ControlPath={tmp}/cm-%C", "-o", "ControlPersist=60"]
    ssh = [
        "ssh",
        "-F",
        str(tmp / "client" / ".ssh" / "config"),
        "-o",
        "UserKnownHostsFile=" + str(tmp / "client" / ".ssh" / "known_hosts"),
        *control,
        h.ssh_alias,
    ]  # type: ignore[attr-defined]
    doc, hand = [], []
    try:
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            argv = [PIPPA, "doctor", "--quick", "--json", h.name]  # type: ignore[attr-defined]
            subprocess.run(argv, env=kept, cwd=ROOT, capture_output=True, check=True, timeout=300)
            doc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run(
                [*ssh, "nvidia-smi -q -x; dmesg"], env=env, capture_output=True, check=True, timeout=120
            )
            hand.append(time.perf_counter() - t0)
    finally:
        subprocess.run([*ssh[:-1], "-O", "exit", ssh[-1]], env=env, capture_output=True, timeout=30)
        saved = dict(os.environ)
        os.environ.update(kept)
        reuse.configure(True, spawn=False)
        reuse.forget()
        reuse.disconnect()
        os.environ.clear()
        os.environ.update(saved)
    d, b = statistics.median(doc[1:]), statistics.median(hand[1:])
    print(
        f"1 host, kept connections: pippa doctor --quick (keeper) {d:.2f}s, by hand (OpenSSH "
        f"ControlPersist) {b:.2f}s, ratio {d / b:.2f}x"
    )
    return {"hosts": 1, "kept": True, "doctor_s": d, "by_hand_s": b, "ratio": d / b}


def in_process(h: object, client: Path, repeat: int) -> dict[str, float]:
    """The doctor verb and the by-hand commands over one open connection (host-side cost only); the
    doctor also with its torch-facts cache removed before each request (one python start more)."""
    import os

    import sshd

    from pippa_ops import doctor
    from pippa_ops.hosts.connect import direct_transport
    from pippa_ops.hosts.inventory import resolve

    os.environ.update(sshd.client_vars(client))
    spec = resolve(h.name)  # type: ignore[attr-defined]
    cache = Path(h.home) / ".cache" / "pippa" / "doctor-torch.json"  # type: ignore[attr-defined]
    doc, cold, hand = [], [], []
    with direct_transport(spec) as t:
        t.run("true")
        doctor.check_host(spec, t, quick=True)  # fills the cache
        for _ in range(repeat):
            t0 = time.perf_counter()
            doctor.check_host(spec, t, quick=True)
            doc.append(time.perf_counter() - t0)
            cache.unlink(missing_ok=True)
            t0 = time.perf_counter()
            doctor.check_host(spec, t, quick=True)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            t.run("nvidia-smi -q -x; dmesg", check=True)
            hand.append(time.perf_counter() - t0)
    d, c, b = statistics.median(doc), statistics.median(cold), statistics.median(hand)
    print(
        f"one open connection: doctor request {d:.3f}s (torch facts cached; {c:.3f}s probing the python), "
        f"the by-hand commands {b:.3f}s, ratio {d / b:.2f}x ({c / b:.2f}x uncached)"
    )
    return {"hosts": 1, "in_process": True, "doctor_s": d, "uncached_s": c, "by_hand_s": b, "ratio": d / b}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm", action="store_true", help="the active GEMM's overhead (needs a GPU, or --cpu)")
    ap.add_argument("--cpu", action="store_true", help="with --gemm: tiny sizes on the CPU (dry run)")
    ap.add_argument("--seconds", type=float, default=3.0, help="with --gemm: seconds per loop")
    ap.add_argument("--repeat", type=int, default=3, help="passive: runs per side (median)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    if args.gemm:
        r: object = gemm_overhead(args.cpu, 0.3 if args.cpu else args.seconds)
        print(
            f"doctor GEMM {r['doctor_tflops']:.3f} TFLOPS, bare matmul loop {r['bare_tflops']:.3f} "  # type: ignore[index]
            f"TFLOPS, ratio {r['ratio']:.3f}x (goal >= 0.95x)"
        )  # type: ignore[index]
    else:
        r = passive(args.repeat)
    if args.json:
        args.json.write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
