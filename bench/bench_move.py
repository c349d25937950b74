"""Move benchmark: the copy of ``pippa resume RUN --on HOST`` (host -> laptop -> host, checksummed,
staged and renamed into place) vs ``scp -3`` of the same run directory between the same two loopback
sshd hosts, alternately in one run.

A run directory with a ``--mb`` MB checkpoint (random bytes: nothing to compress) is made on host 1;
each round moves it to host 2 with pippa's move stream (``runs.moving.move``: the agent's ``pull`` on one host
into its ``receive_run`` on the other, the laptop in between; the resume on the new host is not timed)
and with ``scp -3 -r`` (also through the laptop), the copy removed between rounds. Goal (issue 34):
pippa's throughput >= 0.8x scp's.

    .venv/bin/python bench/bench_move.py [--mb 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import client_copy, sshd, start_world

RUN_ID = "20261126-120000-tiny-bm01"


def make_run(host: sshd.SSHHost, mb: int) -> None:
    """A stopped run with one ``mb`` MB checkpoint on ``host``, owned by its user."""
    run = host.home / "pippa" / "runs" / RUN_ID
    ck = run / "checkpoints" / "checkpoint-2"
    ck.mkdir(parents=True, exist_ok=True)
    command = f".venv/bin/python -m training_core.launch tiny --run-dir ~/pippa/runs/{RUN_ID}"
    meta = {
        "run_id": RUN_ID,
        "session": "bm",
        "host": host.name,
        "recipe": "tiny",
        "command": command,
        "started": time.time(),
        "sweep_index": 0,
        "sweep_size": 1,
    }
    (run / "run.json").write_text(json.dumps(meta))
    (run / "metrics.jsonl").write_text('{"type": "step", "step": 1}\n{"type": "step", "step": 2}\n')
    (run / "exit_code").write_text("130\n")
    with open(ck / "model.safetensors", "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    subprocess.run(["chown", "-R", f"{host.user}:", str(host.home / "pippa")], check=True)


def pippa_move(a: sshd.SSHHost, b: sshd.SSHHost) -> float:
    """Seconds of the move's copy (the stream only: the new host's resume is not part of it)."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.runs.moving.locate import locate
    from pippa_ops.runs.moving.move import _from_host, _meta

    t0 = time.perf_counter()
    rec = locate([RUN_ID], a.name)[RUN_ID]
    spec2, tr2 = connect(b.name)
    old, tr1 = connect(a.name)
    with tr1, tr2:
        _from_host(rec, tr1, old, (spec2, tr2), _meta(rec.command, "tiny", RUN_ID, a.name, spec2))
    return time.perf_counter() - t0


def scp3(a: sshd.SSHHost, b: sshd.SSHHost, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    src, dest = f"{a.ssh_alias}:pippa/runs/{RUN_ID}", f"{b.ssh_alias}:pippa/scp-{RUN_ID}"
    ssh_dir = Path(env["HOME"]) / ".ssh"  # ssh reads the passwd home's files, not $HOME's
    argv = [
        "scp",
        "-F",
        str(ssh_dir / "config"),
        "-o",
        f"UserKnownHostsFile={ssh_dir / 'known_hosts'}",
        "-3",
        "-q",
        "-r",
        src,
        dest,
    ]
    p = subprocess.run(argv, env=env, capture_output=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"scp -3 failed: {p.stderr.decode(errors='replace')}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    world = start_world("bench_move", 2)
    a, b = world.hosts
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = client_copy(world, Path(tmp) / "client")
            os.environ.update(sshd.client_vars(Path(tmp) / "client"))
            os.environ.pop("SSH_AUTH_SOCK", None)
            make_run(a, args.mb)
            (b.home / "pippa" / "runs").mkdir(parents=True, exist_ok=True)
            subprocess.run(["chown", "-R", f"{b.user}:", str(b.home / "pippa")], check=True)
            moves, scps = [], []
            for _ in range(args.repeat):
                moves.append(pippa_move(a, b))
                shutil.rmtree(b.home / "pippa" / "runs" / RUN_ID)
                scps.append(scp3(a, b, env))
                shutil.rmtree(b.home / "pippa" / f"scp-{RUN_ID}")
            move_s, scp_s = statistics.median(moves), statistics.median(scps)
            print(f"checkpoint {args.mb} MB, {args.repeat} rounds alternately, medians:")
            print(
                f"  pippa move (host -> laptop -> host, sha256, staged): {move_s:6.2f} s  "
                f"{args.mb / move_s:6.1f} MB/s  ({', '.join(f'{x:.2f}' for x in moves)})"
            )
            print(
                f"  scp -3 -r:                                           {scp_s:6.2f} s  "
                f"{args.mb / scp_s:6.1f} MB/s  ({', '.join(f'{x:.2f}' for x in scps)})"
            )
            ratio = scp_s / move_s
            met = "met" if ratio >= 0.8 else "MISSED"
            print(f"  pippa's throughput / scp's: {ratio:.2f}x (goal >= 0.8x): {met}")
    finally:
        world.close()


if __name__ == "__main__":
    main()
