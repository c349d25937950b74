"""WAN benchmark: pippa with its connection keeper vs OpenSSH, fresh and ControlPersist, at a real distance.

A delay proxy (asyncio, below) sits in front of one loopback sshd (tests/sshd.py) and holds every
chunk for a fixed one-way delay in each direction (0 and --delay-ms, default 40: an 80 ms round
trip). Each command, medians of --repeat, side by side:

  ps         pippa ps --host H                 | ssh H 'tmux ls; ls ~/pippa/runs'
  run --cmd  pippa run --host H --cmd 'sleep 60' | rsync -az (no change) + ssh H tmux new-session -d
  sync       pippa sync H (no change)          | rsync -az over the same kind of connection
  logs       pippa logs RUN --host H (50 lines)| ssh H tail -n 50 ~/pippa/runs/RUN/output.log
  gpus       pippa gpus H                      | ssh H nvidia-smi --query-gpu=... --format=csv
             (the host's nvidia-smi is tests/dash/fake_smi, replaying a real capture, for both)

pippa cold: no keeper (a direct connection; the keeper starts as the command exits); pippa warm: the
keeper holds the connection; pippa --no-reuse: how every command connected before the keeper. OpenSSH
fresh: ControlMaster=no; ControlPersist cold: the command that starts the master; warm: a live master.
CLI start-up (``pippa ps --help`` and ``pippa --version``, no network) is reported on its own lines,
because at these distances it is a large share of a warm command; "pippa in-process" is the same work
called in this process through the warm keeper (what the command costs without it). A warm command
also finds the warm process (``pippa_ops.instant``) that a hot verb starts after it, as the keeper is.
The local overhead of a warm command is its wall time at 0 ms (loopback, where the network costs
almost nothing). The commands run with bytecode caching on, as an installed pippa has it (a sandbox's
PYTHONDONTWRITEBYTECODE would make every command compile its modules), cached under the bench's
temporary directory so that no tree is written.

    .venv/bin/python bench/bench_wan.py [--repeat 5] [--delay-ms 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import PIPPA, ROOT, commit_all, start_world, timed

from pippa_ops.gpu import query, query_argv
from pippa_ops.hosts.connect import connect
from pippa_ops.instant import client as instant
from pippa_ops.runs.launching.launch import launch
from pippa_ops.runs.records.listing import current_run, list_runs, read_run
from pippa_ops.sync import sync
from pippa_ops.transport import reuse
from pippa_ops.transport.keeper import client as keeper_client


class DelayProxy:
    """TCP forwarder that delivers each chunk ``delay_s`` after it arrived, in order, both ways."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.delay_s = 0.0
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.port = asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result()

    async def _listen(self) -> int:
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return int(server.sockets[0].getsockname()[1])

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def receive() -> None:
            try:
                while data := await reader.read(65536):
                    queue.put_nowait((self.loop.time() + self.delay_s, data))
            finally:
                queue.put_nowait((self.loop.time() + self.delay_s, b""))

        async def deliver() -> None:
            try:
                while True:
                    at, data = await queue.get()
                    if at > self.loop.time():
                        await asyncio.sleep(at - self.loop.time())
                    if not data:
                        return
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()

        await asyncio.gather(receive(), deliver(), return_exceptions=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--delay-ms", type=float, default=40.0)
    args = ap.parse_args()
    world = start_world("bench_wan", 1)
    h = world.hosts[0]
    tmp = Path(tempfile.mkdtemp(prefix="bw"))
    try:
        run_bench(world, h, tmp, args.repeat, args.delay_ms / 1000)
    finally:
        with_env_disconnect()
        world.close()
        shutil.rmtree(tmp, ignore_errors=True)


def with_env_disconnect() -> None:
    reuse.configure(True, spawn=False)
    reuse.forget()
    reuse.disconnect()


def run_bench(world, h, tmp: Path, repeat: int, delay_s: float) -> None:  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "tests" / "dash"))
    import fake_smi

    h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
    proxy = DelayProxy((h.address, h.port))
    client = tmp / "client"
    subprocess.run(["cp", "-a", str(world.client_template), str(client)], check=True)
    kh = client / ".ssh" / "known_hosts"
    kind, b64 = h.host_key_line.split()[1:3]
    with kh.open("a") as f:
        f.write(f"[127.0.0.1]:{proxy.port} {kind} {b64}\n")
    key = client / ".ssh" / "id_ed25519"
    with (client / ".ssh" / "config").open("a") as f:
        f.write(f"Host wan\n  HostName 127.0.0.1\n  Port {proxy.port}\n  User {h.user}\n")
        f.write(f"  IdentityFile {key}\n  IdentitiesOnly yes\n")
    # The pippa host "wan" is that ssh alias: the same address, user, key.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SSH_AUTH_SOCK", "PIPPA_NO_REUSE", "PYTHONDONTWRITEBYTECODE")
    }
    env.update(
        PYTHONPYCACHEPREFIX=str(tmp / "pycache"),
        HOME=str(client),
        XDG_CONFIG_HOME=str(client / ".config"),
        PIPPA_INVENTORY=str(client / "team-pippa.toml"),
        PIPPA_RUNTIME_DIR=str(tmp / "run"),
    )
    os.environ.clear()
    os.environ.update(env)  # this process asks the same keeper (its status) as the commands
    repo = tmp / "repo"
    repo.mkdir()
    for i in range(200):
        p = repo / f"pkg{i % 10}" / f"mod_{i:04d}.py"
        p.parent.mkdir(exist_ok=True)
        p.write_text(f"# module {i}\n" + "x = 1\n" * 50)
    commit_all(repo)

    ssh_base = ["ssh", "-F", str(client / ".ssh" / "config"), "-o", "BatchMode=yes"]
    ssh_base += ["-o", f"UserKnownHostsFile={kh}"]
    fresh = [*ssh_base, "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    cp = [*ssh_base, "-o", "ControlMaster=auto", "-o", f"ControlPath={tmp}/cm-%C", "-o", "ControlPersist=300"]

    def rsync(ssh: list[str]) -> list[str]:
        return ["rsync", "-az", "--exclude", ".git", "-e", " ".join(ssh), "./", "wan:hand/"]

    def t(argv: list[str]) -> float:
        return timed(argv, env, repo, timeout=300)[0]

    def tt(*argvs: list[str]) -> float:
        return sum(t(a) for a in argvs)

    def no_keeper() -> None:
        """End the keeper and the warm process, and let them finish exiting (their teardown must not
        load the next command): a cold command finds neither."""
        lock = instant.socket_path().with_suffix(".lock")
        pid = int(lock.read_text() or 0) if lock.exists() else 0
        if pid and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        reuse.forget()
        st = reuse.status()
        reuse.disconnect()
        if st:
            deadline = time.monotonic() + 10
            while Path(f"/proc/{st['pid']}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        time.sleep(0.3)

    def keeper_connected() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reuse.forget()
            st = reuse.status()
            if st and any(x["connections"] for x in st["hosts"]) and instant.socket_path().exists():
                return
            time.sleep(0.05)
        raise SystemExit("bench_wan: the keeper did not connect (or no warm process started)")

    def master_down() -> None:
        subprocess.run([*cp, "-O", "exit", "wan"], env=env, capture_output=True)

    reuse.configure(True, spawn=False)
    # Ready the host for both paths, and a 50-line run for logs.
    t([PIPPA, "--no-reuse", "sync", "wan"])
    t(rsync(fresh))
    out = timed(
        [
            PIPPA,
            "--no-reuse",
            "run",
            "--no-wait",
            "--host",
            "wan",
            "-n",
            "src",
            "--cmd",
            "seq 1 50",
            "--json",
        ],
        env,
        repo,
    )[1]
    run_id = json.loads(out)["run_ids"][0]
    time.sleep(1)
    counter = iter(range(10**6))

    def pippa_run() -> list[str]:
        return [PIPPA, "run", "--no-wait", "--host", "wan", "-n", f"p{next(counter)}", "--cmd", "sleep 60"]

    def hand_run(ssh: list[str]) -> tuple[list[str], list[str]]:
        return rsync(ssh), [*ssh, "wan", f"tmux new-session -d -s h{next(counter)} 'sleep 60'"]

    os.chdir(repo)  # the in-process rows sync this repo, as the commands do from their cwd

    def core(verb: str) -> float:
        """The same work as the command, in this process: no interpreter or CLI start-up."""
        t0 = time.perf_counter()
        spec, tr = connect("wan")
        with tr:
            if verb == "ps":
                list_runs(tr, spec.remote_dir)
            elif verb == "run --cmd":
                launch(spec, tr, command="sleep 60", session=f"c{next(counter)}")
            elif verb == "sync":
                sync(spec, tr, repo)
            elif verb == "gpus":
                query(tr)
            else:
                listed, chosen, _text = read_run(tr, spec.remote_dir, run_id)  # as `pippa logs RUN --host H`
                assert current_run(listed, run_id).run_id == chosen
        assert isinstance(tr, keeper_client.KeeperTransport) and tr.relayed, "in-process went direct"
        return time.perf_counter() - t0

    verbs = {
        "ps": ([PIPPA, "ps", "--host", "wan"], lambda ssh: ([*ssh, "wan", "tmux ls; ls ~/pippa/runs"],)),
        "run --cmd": (None, hand_run),
        "sync": ([PIPPA, "sync", "wan"], lambda ssh: (rsync(ssh),)),
        "logs": (
            [PIPPA, "logs", run_id, "--host", "wan"],
            lambda ssh: ([*ssh, "wan", f"tail -n 50 ~/pippa/runs/{run_id}/output.log"],),
        ),
        "gpus": ([PIPPA, "gpus", "wan"], lambda ssh: ([*ssh, "wan", " ".join(query_argv())],)),
    }
    delays = (0.0, delay_s)
    cells: dict[tuple[str, str, str, float], list[float]] = {}

    def add(verb: str, way: str, when: str, d: float, v: float) -> None:
        cells.setdefault((verb, way, when, d), []).append(v)

    startup: dict[str, list[float]] = {"pippa ps --help": [], "pippa --version": []}
    for d in delays:
        proxy.delay_s = d
        for rep in range(repeat):
            for line in startup:
                startup[line].append(t([PIPPA, *line.split()[1:]]))
            for verb, (pippa, hand) in verbs.items():
                argv = pippa if pippa is not None else None

                def pip(extra: list[str] | None = None, argv: list[str] | None = argv) -> float:
                    a = argv if argv is not None else pippa_run()
                    return t([a[0], *(extra or []), *a[1:]])

                # cold with and without the keeper, in alternating order, each with no keeper running
                no_keeper()
                for way in (("before", "cold"), ("cold", "before"))[rep % 2]:
                    if way == "before":
                        add(verb, "pippa --no-reuse (before)", "cold", d, pip(["--no-reuse"]))
                    else:
                        add(verb, "pippa", "cold", d, pip())
                        keeper_connected()
                pip()  # the keeper's first use of its connection (spare channel, agent ahead)
                add(verb, "pippa", "warm", d, pip())
                add(verb, "pippa in-process", "warm", d, core(verb))
                add(verb, "ssh fresh", "cold", d, tt(*hand(fresh)))
                master_down()
                add(verb, "ssh ControlPersist", "cold", d, tt(*hand(cp)))
                add(verb, "ssh ControlPersist", "warm", d, tt(*hand(cp)))
                if verb == "run --cmd":  # keep the host as it was: ps lists as many runs every time,
                    h.run_as_user(["tmux", "kill-server"])  # and the logs run stays in the newest 50
                    runs = f"{h.home}/pippa/runs"
                    h.run_as_user(
                        [
                            "find",
                            runs,
                            "-mindepth",
                            "1",
                            "-maxdepth",
                            "1",
                            "!",
                            "-name",
                            run_id,
                            "-exec",
                            "rm",
                            "-rf",
                            "{}",
                            "+",
                        ]
                    )
        print(f"  (done: {d * 1000:.0f} ms one-way)", flush=True)
    master_down()
    h.run_as_user(["tmux", "kill-server"])
    report(cells, delays, startup, repeat)


def report(cells, delays, startup, repeat) -> None:  # type: ignore[no-untyped-def]
    def med(verb: str, way: str, when: str, d: float) -> float | None:
        v = cells.get((verb, way, when, d))
        return statistics.median(v) if v else None

    def fmt(x: float | None) -> str:
        return f"{x:7.3f}" if x is not None else "      -"

    ways = ("pippa", "pippa --no-reuse (before)", "pippa in-process", "ssh fresh", "ssh ControlPersist")
    print(f"\nWAN bench: one loopback sshd behind a delay proxy, medians of {repeat} (seconds)")
    head = "".join(f"   {d * 1000:3.0f} ms cold  warm" for d in delays)
    print(f"{'command':10} {'way':27}{head}")
    for verb in dict.fromkeys(k[0] for k in cells):
        for way in ways:
            row = "".join(
                f"    {fmt(med(verb, way, 'cold', d))} {fmt(med(verb, way, 'warm', d))}" for d in delays
            )
            print(f"{verb:10} {way:27}{row}")
    print("\npippa CLI start-up (no network), goal <= 0.050 s:")
    for line, times in startup.items():
        su = statistics.median(times)
        print(f"  {line:18} {su:.3f} s ({'ok' if su <= 0.050 else 'MISSED'})")
    near = delays[0]
    print(f"a warm command's local overhead (its wall time at {near * 1000:.0f} ms), goal <= 0.040 s:")
    for verb in dict.fromkeys(k[0] for k in cells):
        w = med(verb, "pippa", "warm", near)
        if w is not None:
            print(f"  {verb:10} {w:.3f} s ({'ok' if w <= 0.040 else 'MISSED'})")
    far = delays[-1]
    print(f"\nratios at {far * 2000:.0f} ms round trip, warm pippa / warm OpenSSH ControlPersist: the")
    print("command as typed, and its work in-process (the network part, no CLI start-up)")
    goals = {"ps": 1.0, "run --cmd": 1.0, "sync": 1.0, "logs": 1.0, "gpus": 1.0}
    for verb, goal in goals.items():
        p, o = med(verb, "pippa", "warm", far), med(verb, "ssh ControlPersist", "warm", far)
        c = med(verb, "pippa in-process", "warm", far)
        if p is None or o is None or c is None:
            continue

        def verdict(x: float, goal: float | None = goal) -> str:
            return "" if goal is None else f" ({'ok' if x <= goal else 'MISSED'})"

        goal_text = "" if goal is None else f"   goal <= {goal:.1f}x"
        cmd, inproc = f"{p / o:5.2f}x{verdict(p / o)}", f"{c / o:5.2f}x{verdict(c / o)}"
        print(f"  {verb:10} command {cmd}   in-process {inproc}{goal_text}")
    print("cold pippa / pippa --no-reuse (the cost of the keeper to a cold command; goal: no worse)")
    for d in delays:
        parts = []
        for verb in goals:
            c, b = med(verb, "pippa", "cold", d), med(verb, "pippa --no-reuse (before)", "cold", d)
            if c and b:
                parts.append(f"{verb} {c / b:4.2f}x")
        print(f"  {d * 1000:3.0f} ms: " + ", ".join(parts))


if __name__ == "__main__":
    os.umask(0o022)
    main()
