"""Sync benchmark: `pippa sync` vs `rsync -az` over the same loopback sshd, measured side by side.

A synthetic repo (2,000 files, 50 MB, text-like content) goes to one loopback host (tests/sshd.py,
so: root and /usr/sbin/sshd). Each case runs both tools alternately ``--repeat`` times and reports
medians: cold (empty destination), no change, one file changed (also the bytes each sent for it).
Goals (issue 2): cold <= 1.0x rsync, no change <= 0.5x, bytes for one changed file <= 2x its size.
With ``--baseline OTHER/bin/pippa`` the other checkout's no-change sync is timed in the same rounds
(right after this one's), and both pippas' no-change wall and CPU medians are compared.

    .venv/bin/python bench/bench_sync.py [--files 2000] [--mb 50] [--repeat 3] [--baseline OTHER/bin/pippa]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import PIPPA, client_copy, commit_all, sshd, start_world, timed, timed_cpu


def make_repo(path: Path, files: int, total_mb: int, rng: random.Random) -> list[str]:
    """Text-like files (base64 of random bytes: compressible like source, not trivially), in 40 dirs."""
    names = []
    sizes = [rng.expovariate(1.0) for _ in range(files)]
    scale = total_mb * 1024 * 1024 / sum(sizes)
    for i, s in enumerate(sizes):
        name = f"pkg{i % 40:02d}/mod_{i:04d}.py"
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        raw = rng.randbytes(max(1, int(s * scale * 3 / 4)))
        (path / name).write_bytes(base64.encodebytes(raw))
        names.append(name)
    commit_all(path)
    return names


def in_process_sync(host: str, client: Path, repo: Path) -> float:
    """The same no-change sync without the CLI's interpreter start and imports (fresh connection)."""
    os.environ.update(sshd.client_vars(client))
    os.environ.pop("SSH_AUTH_SOCK", None)
    from pippa_ops.hosts.connect import connect
    from pippa_ops.sync import sync

    t0 = time.perf_counter()
    spec, transport = connect(host)
    with transport:
        sync(spec, transport, repo)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout's bin/pippa, its no-change sync timed too")
    args = ap.parse_args()
    world = start_world("bench_sync", 1)
    host = world.hosts[0]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            repo.mkdir()
            rng = random.Random(0)
            names = make_repo(repo, args.files, args.mb, rng)
            client = Path(tmp) / "client"
            env = client_copy(world, client)
            kh = client / ".ssh" / "known_hosts"
            ssh = f"ssh -F {client}/.ssh/config -o BatchMode=yes -o UserKnownHostsFile={kh}"
            pippa = [PIPPA, "sync", host.name, "--json"]
            rsync = ["rsync", "-az", "--stats", "--exclude", ".git", "-e", ssh, "./", f"{host.ssh_alias}:rs/"]
            wipe = ["runuser", "-u", host.user, "--", "rm", "-rf", f"{host.home}/pippa", f"{host.home}/rs"]
            results: dict[str, dict[str, list[float]]] = {"cold": {}, "no change": {}, "one changed": {}}
            sent = {"pippa": 0, "rsync": 0}
            changed_size = 0
            core_no_change: list[float] = []
            ab: dict[str, tuple[list[float], list[float]]] = {"baseline": ([], []), "this": ([], [])}
            for _ in range(args.repeat):
                subprocess.run(wipe, check=True)
                for tool, argv in (("pippa", pippa), ("rsync", rsync)):
                    results["cold"].setdefault(tool, []).append(timed(argv, env, repo)[0])
                if args.baseline:  # the other's first sync here may rewrite its marker: not timed
                    timed([args.baseline, *pippa[1:]], env, repo)
                for tool, argv in (("pippa", pippa), ("rsync", rsync)):
                    results["no change"].setdefault(tool, []).append(timed(argv, env, repo)[0])
                if args.baseline:
                    for way, argv in (("baseline", [args.baseline, *pippa[1:]]), ("this", pippa)):
                        wall, cpu, out = timed_cpu(argv, env, repo)
                        ab[way][0].append(wall)
                        ab[way][1].append(cpu)
                        if json.loads(out)["bytes_sent"] > 4096:
                            raise SystemExit(f"{way}: a no-change sync sent {out}")
                core_no_change.append(in_process_sync(host.name, client, repo))
                target = repo / names[rng.randrange(len(names))]
                target.write_bytes(base64.encodebytes(rng.randbytes(75_000)))  # ~100 KB, all new
                changed_size = target.stat().st_size
                for tool, argv in (("pippa", pippa), ("rsync", rsync)):
                    elapsed, out = timed(argv, env, repo)
                    results["one changed"].setdefault(tool, []).append(elapsed)
                    if tool == "pippa":
                        sent["pippa"] = json.loads(out)["bytes_sent"]
                    else:
                        m = re.search(r"Total bytes sent: ([\d,.]+)", out)
                        sent["rsync"] = int(re.sub(r"[,.]", "", m.group(1))) if m else 0
        total = sum(1 for _ in names)
        print(f"sync bench: {total} files, {args.mb} MB, loopback sshd, medians of {args.repeat}")
        print(f"{'case':<12} {'pippa s':>8} {'rsync s':>8} {'ratio':>6}  goal")
        goals = {"cold": 1.0, "no change": 0.5, "one changed": None}
        for case, by_tool in results.items():
            p, r = statistics.median(by_tool["pippa"]), statistics.median(by_tool["rsync"])
            goal = goals[case]
            mark = "" if goal is None else f"<= {goal}x {'ok' if p / r <= goal else 'MISSED'}"
            print(f"{case:<12} {p:8.3f} {r:8.3f} {p / r:6.2f}  {mark}")
        core, r = statistics.median(core_no_change), statistics.median(results["no change"]["rsync"])
        print(f"no change, pippa core in-process (connect + sync): {core:.3f} s = {core / r:.2f}x rsync")
        ratio = sent["pippa"] / changed_size
        print(
            f"one changed file of {changed_size} B: pippa sent {sent['pippa']} B ({ratio:.2f}x its size, "
            f"goal <= 2x {'ok' if ratio <= 2 else 'MISSED'}), rsync sent {sent['rsync']} B"
        )
        if args.baseline:
            (bw, bc), (tw, tc) = ([statistics.median(x) for x in ab[k]] for k in ("baseline", "this"))
            print(
                f"no change, this vs baseline: wall {tw:.3f} / {bw:.3f} s = {tw / bw:.2f}x, "
                f"cpu {tc:.3f} / {bc:.3f} s = {tc / bc:.2f}x; load {os.getloadavg()[0]:.1f}"
            )
    finally:
        world.close()


if __name__ == "__main__":
    os.umask(0o022)
    main()
