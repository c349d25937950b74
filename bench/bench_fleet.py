"""Fleet benchmark: pippa over N loopback hosts against OpenSSH (a ControlPersist ``ssh`` loop) and pdsh.

Run as root (tests/sshd.py: one sshd and one Unix user per host; pdsh from ``apt-get install pdsh``):

    .venv/bin/python bench/bench_fleet.py [--sizes 1,8,32,64] [--dash-sizes 1,8,64] [--seconds 60]
                                          [--repeat 3] [--before /work/main/.venv/bin/pippa]

Every host gets a fake nvidia-smi with 8 GPUs (tests/dash/fake_smi.py, a real H100 capture) and the
first four a running run. For each N, side by side in one run (medians of ``--repeat``):
- ``ps``, ``hosts``, ``gpus`` with pippa, cold (no connection keeper: it goes direct and starts one)
  and warm (the keeper holds every host); ``gpus`` names the N hosts in one command. Against the
  same hosts: a ControlPersist ``ssh`` loop (all N at once) and pdsh -R ssh,
  cold (fresh connections) and warm (live masters), running what each verb reads there (``tmux ls``,
  ``nvidia-smi --query-gpu``, ``true``).
- The hosts' side: every sshd is in one cgroup v1 ``cpuacct`` group (its sessions, agents and tmux
  servers inherit it), so its CPU seconds per call and host are measured apart from wall time, as on
  a real fleet where they are other machines' CPU.
- ``pippa dash`` in a real terminal (tmux, 160x48) at each of ``--dash-sizes``: seconds until every
  host reads up, then over ``--seconds`` the CPU (% of one core), RSS and threads of the dashboard and
  of the keeper, and the hosts' side CPU.
``--before PIPPA``: the same pippa rows with another checkout's ``pippa``, installed in a virtual
environment of its own (a PYTHONPATH wrapper is not enough: the warm process and the keeper it starts
import the environment's own checkout).
Figures and the machine's load go to stdout; docs/fleet.md keeps the dated ones.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import PIPPA, ROOT, sshd, start_world

sys.path.insert(0, str(ROOT / "tests" / "dash"))
import fake_smi

SMI = "nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"
REMOTE = {"ps": "tmux ls 2>/dev/null; ls ~/pippa/runs 2>/dev/null; true", "hosts": "true", "gpus": SMI}
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICK = os.sysconf("SC_CLK_TCK")


class HostsCgroup:
    """The hosts' side: every sshd (and all it starts) in one cpuacct cgroup."""

    def __init__(self, name: str) -> None:
        self.path = CPUACCT / name
        self.path.mkdir(exist_ok=True)

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        parent = CPUACCT / "cgroup.procs"
        for pid in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                parent.write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class Client:
    """A client home listing the first ``n`` hosts (inventory and ~/.ssh/config), its keeper dir."""

    def __init__(self, world: sshd.World, n: int, tmp: Path) -> None:
        self.hosts = world.hosts[:n]
        self.home = Path(tempfile.mkdtemp(prefix=f"c{n}-", dir=tmp)) / "home"
        shutil.copytree(world.client_template, self.home)
        names = {h.name for h in self.hosts}
        inv = self.home / ".config" / "pippa" / "hosts.toml"
        blocks = inv.read_text().split("[hosts.")
        inv.write_text("".join("[hosts." + b for b in blocks if b.split("]")[0] in names))
        cfg = self.home / ".ssh" / "config"
        entries = cfg.read_text().split("Host ")
        aliases = {h.ssh_alias for h in self.hosts}
        cfg.write_text("".join("Host " + e for e in entries if e.split("\n")[0].strip() in aliases))
        self.cfg = cfg
        self.runtime = Path(tempfile.mkdtemp(prefix="pbf"))  # short: a socket path has ~100 bytes
        self.env = sshd.client_subprocess_env(self.home)
        self.env.pop("PIPPA_NO_REUSE", None)
        self.env.pop("TMUX", None)
        self.env["PIPPA_RUNTIME_DIR"] = str(self.runtime)
        self.control = self.home.parent / "cm"
        self.control.mkdir()

    def ssh(self, master: bool) -> list[str]:
        known = self.home / ".ssh" / "known_hosts"  # ssh reads the passwd home's, not $HOME's
        opts = ["-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes"]
        if master:
            opts += [
                "-o",
                "ControlMaster=auto",
                "-o",
                f"ControlPath={self.control}/%C",
                "-o",
                "ControlPersist=600",
            ]
        else:
            opts += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return ["ssh", "-F", str(self.cfg), *opts]

    def keeper_pid(self) -> int | None:
        for lock in self.runtime.glob("k-*.lock"):
            with contextlib.suppress(OSError, ValueError):
                return int(lock.read_text())
        return None


def run(argv: list[str], env: dict[str, str], check: bool = True) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} failed ({p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t0


def in_parallel(argvs: list[list[str]], env: dict[str, str], at_once: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(lambda a: run(a, env), argvs))
    return time.perf_counter() - t0


def measure(fn: Callable[[], float], repeat: int, hosts_cg: HostsCgroup, n: int) -> tuple[float, float]:
    """Median wall seconds, and the hosts' CPU milliseconds per call and host."""
    cpu0 = hosts_cg.seconds()
    walls = [fn() for _ in range(repeat)]
    return statistics.median(walls), (hosts_cg.seconds() - cpu0) * 1000 / (repeat * n)


def pippa_ways(pippa: str, c: Client, verb: str) -> Callable[[], float]:
    if verb == "gpus":
        return lambda: run([pippa, "gpus", *(h.name for h in c.hosts), "--json"], c.env)
    return lambda: run([pippa, verb, "--json"], c.env)


def disconnect(pippa: str, c: Client) -> None:
    run([pippa, "hosts", "--disconnect"], c.env, check=False)


def warm_up(pippa: str, c: Client) -> None:
    """A keeper that holds every host: commands until two in a row find it (ps touches them all)."""
    for _ in range(3):
        run([pippa, "ps", "--json"], c.env)
        time.sleep(1.0)


def bench_commands(c: Client, n: int, repeat: int, cg: HostsCgroup, pippas: dict[str, str]) -> list[tuple]:
    rows = []
    for verb in ("ps", "hosts", "gpus"):
        for label, pippa in pippas.items():
            fn = pippa_ways(pippa, c, verb)

            def cold(fn: Callable[[], float] = fn, pippa: str = pippa) -> float:
                disconnect(pippa, c)
                return fn()

            rows.append((n, verb, label, "cold", *measure(cold, repeat, cg, n)))
            warm_up(pippa, c)
            rows.append((n, verb, label, "warm", *measure(fn, repeat, cg, n)))
            disconnect(pippa, c)
        remote = REMOTE[verb]
        for master in (False, True):
            when = "warm" if master else "cold"
            ssh = c.ssh(master)
            loop = [[*ssh, h.ssh_alias, remote] for h in c.hosts]
            if master:
                in_parallel(loop, c.env, n)  # the masters start here
            rows.append(
                (
                    n,
                    verb,
                    "ssh loop",
                    when,
                    *measure(lambda loop=loop: in_parallel(loop, c.env, n), repeat, cg, n),
                )
            )
            env = {**c.env, "PDSH_SSH_ARGS": " ".join([*ssh[1:], "%h"]), "PDSH_RCMD_TYPE": "ssh"}
            pdsh = [
                "pdsh",
                "-R",
                "ssh",
                "-f",
                str(max(n, 1)),
                "-w",
                ",".join(h.ssh_alias for h in c.hosts),
                remote,
            ]
            rows.append(
                (n, verb, "pdsh", when, *measure(lambda pdsh=pdsh, env=env: run(pdsh, env), repeat, cg, n))
            )
        print_rows(rows[-2 * len(pippas) - 4 :])
    return rows


def print_rows(rows: list[tuple]) -> None:
    for n, verb, way, when, wall, cpu in rows:
        print(
            f"  N={n:<3} {verb:<6} {way:<14} {when:<5} wall {wall * 1000:8.0f} ms"
            f"   hosts' CPU {cpu:6.1f} ms/host/call",
            flush=True,
        )


# ------------------------------------------------------------------------------------------- dash
def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_status(pid: int) -> tuple[float, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]
    threads = int(re.search(r"Threads:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    return rss, threads


def bench_dash(c: Client, n: int, seconds: float, cg: HostsCgroup, pippa: str, label: str) -> tuple:
    disconnect(pippa, c)
    warm_up(pippa, c)
    sock = f"pbf-{os.getpid()}-{n}"
    tmux = ["tmux", "-L", sock]
    t0 = time.monotonic()
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "dash", "-x", "160", "-y", "48", pippa, "dash"],
        env=c.env,
        check=True,
    )
    try:
        pid = int(
            subprocess.run(
                [*tmux, "display", "-p", "-t", "dash", "#{pane_pid}"],
                env=c.env,
                capture_output=True,
                text=True,
            ).stdout
        )

        def screen() -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "dash"], env=c.env, capture_output=True, text=True
            ).stdout

        def all_up(s: str) -> bool:
            return f"{n}/{n} hosts, {n} up" in s or (n * 6 <= 46 and s.count("● up, 8 GPUs") >= n)

        up_s = None
        while time.monotonic() - t0 < 120:
            if all_up(screen()):
                up_s = time.monotonic() - t0
                break
            time.sleep(0.2)
        time.sleep(5)  # past the start: the steady state
        kpid = c.keeper_pid()
        d0, k0, h0, w0 = proc_cpu(pid), proc_cpu(kpid) if kpid else 0.0, cg.seconds(), time.monotonic()
        time.sleep(seconds)
        d1, k1, h1, w1 = proc_cpu(pid), proc_cpu(kpid) if kpid else 0.0, cg.seconds(), time.monotonic()
        drss, dthreads = proc_status(pid)
        krss, kthreads = proc_status(kpid) if kpid else (0.0, 0)
        wall = w1 - w0
        row = (
            n,
            label,
            up_s,
            100 * (d1 - d0) / wall,
            drss,
            dthreads,
            100 * (k1 - k0) / wall,
            krss,
            kthreads,
            100 * (h1 - h0) / wall / n,
        )
        print_dash([row])
        return row
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        disconnect(pippa, c)


def print_dash(rows: list[tuple]) -> None:
    for n, label, up_s, dcpu, drss, dthr, kcpu, krss, kthr, hcpu in rows:
        up = f"{up_s:5.1f} s" if up_s is not None else "  never"
        print(
            f"  N={n:<3} {label:<8} all up after {up}   dash {dcpu:5.1f}% {drss:5.0f} MiB {dthr:3d} thr   "
            f"keeper {kcpu:5.1f}% {krss:5.0f} MiB {kthr:3d} thr   hosts {hcpu:5.2f}%/host",
            flush=True,
        )


def put_runs(world: sshd.World, client: Client) -> None:
    """A running run on each of the first four hosts (as pippa starts one: tmux, run dir)."""
    os.environ.update(sshd.client_vars(client.home))
    from pippa_ops.hosts.connect import open_transport
    from pippa_ops.hosts.inventory import resolve
    from pippa_ops.runs.launching.launch import launch

    for h in world.hosts[:4]:
        spec = resolve(h.name)
        with open_transport(spec) as t:
            launch(spec, t, command="sleep 3600", session=f"bench{h.name}", sync=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32,64")
    ap.add_argument("--dash-sizes", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", help="another checkout's pippa, measured beside this one")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the hosts and users go (finally) on a kill too
    if shutil.which("pdsh") is None:
        raise SystemExit("bench_fleet: pdsh missing (apt-get install pdsh)")
    sizes = [int(x) for x in args.sizes.split(",") if x]
    dash_sizes = [int(x) for x in args.dash_sizes.split(",") if x]
    pippas = {"pippa": PIPPA, **({"before": args.before} if args.before else {})}
    print(
        f"bench_fleet {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    world = start_world("bench_fleet", max(sizes + dash_sizes))
    cg = HostsCgroup(f"pippa-bench-{world.token}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    clients: list[Client] = []
    try:
        for h in world.hosts:
            assert h._proc is not None
            cg.add(h._proc.pid)
            h.install_bin("nvidia-smi", fake_smi.script(gpus=8, python=h.python))
        biggest = Client(world, len(world.hosts), tmp)
        clients.append(biggest)
        put_runs(world, biggest)
        rows = []
        for n in sizes:
            c = Client(world, n, tmp)
            clients.append(c)
            rows += bench_commands(c, n, args.repeat, cg, pippas)
        print("\nratios, warm (pippa / anchor):")
        cells = {(n, v, w, t): (wall, cpu) for n, v, w, t, wall, cpu in rows}
        for n in sizes:
            for verb in ("ps", "hosts", "gpus"):
                p = cells[(n, verb, "pippa", "warm")][0]
                print(
                    f"  N={n:<3} {verb:<6} pippa/pdsh {p / cells[(n, verb, 'pdsh', 'warm')][0]:5.2f}x   "
                    f"pippa/ssh loop {p / cells[(n, verb, 'ssh loop', 'warm')][0]:5.2f}x"
                )
        if 1 in sizes:
            for n in sizes[1:]:
                r = cells[(n, "hosts", "pippa", "warm")][0] / cells[(1, "hosts", "pippa", "warm")][0]
                a = cells[(n, "hosts", "pdsh", "warm")][0] / cells[(1, "hosts", "pdsh", "warm")][0]
                # the anchor's own growth: on one machine the N hosts' sshds share its cores with the client
                print(f"  hosts warm at N={n} / N=1: pippa {r:.2f}x, pdsh {a:.2f}x")
        print(f"\ndashboard (tmux 160x48, {args.seconds:.0f} s steady):", flush=True)
        for n in dash_sizes:
            c = Client(world, n, tmp)
            clients.append(c)
            for label, pippa in pippas.items():
                bench_dash(c, n, args.seconds, cg, pippa, label)
        print(f"\nload {os.getloadavg()[0]:.1f} at the end", flush=True)
    finally:
        for c in clients:
            for pippa in pippas.values():
                disconnect(pippa, c)
            shutil.rmtree(c.runtime, ignore_errors=True)
        cg.close()
        world.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
