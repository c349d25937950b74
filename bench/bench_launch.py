"""Launch benchmark: `pippa run --cmd 'sleep 60'` on a ready loopback host vs the same by hand.

By hand = what the team typed: rsync the repo (no change: the host is ready), then
`ssh HOST tmux new-session -d -s NAME 'sleep 60'`. pippa does more in that time (sync with its
marker, run dir with run.json/cmd.sh/session identity, the session check) in one sync + ONE remote
command. Both are run alternately ``--repeat`` times on one loopback host (tests/sshd.py: root and
/usr/sbin/sshd) with a small synthetic repo; medians are compared. Goal (issue 2): <= 1.0x.
With ``--baseline OTHER/bin/pippa`` the other checkout's `pippa run` is timed in the same rounds too,
and both pippas' wall and CPU medians are compared.

    .venv/bin/python bench/bench_launch.py [--files 200] [--repeat 5] [--baseline OTHER/bin/pippa]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import PIPPA, client_copy, commit_all, start_world, timed, timed_cpu


def make_repo(path: Path, files: int) -> None:
    for i in range(files):
        f = path / f"pkg{i % 10}" / f"mod_{i:04d}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"# module {i}\n" + "x = 1\n" * 50)
    commit_all(path)


def timed_all(argvs: list[list[str]], env: dict[str, str], cwd: Path) -> float:
    return sum(timed(argv, env, cwd, timeout=300)[0] for argv in argvs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", help="another checkout's bin/pippa, timed in the same rounds")
    args = ap.parse_args()
    world = start_world("bench_launch", 1)
    host = world.hosts[0]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            repo.mkdir()
            make_repo(repo, args.files)
            client = Path(tmp) / "client"
            env = client_copy(world, client)
            kh = client / ".ssh" / "known_hosts"
            ssh = ["ssh", "-F", f"{client}/.ssh/config", "-o", "BatchMode=yes"]
            ssh += ["-o", f"UserKnownHostsFile={kh}"]
            dest = f"{host.ssh_alias}:hand/"
            rsync = ["rsync", "-az", "--exclude", ".git", "-e", " ".join(ssh), "./", dest]
            # Make the host ready for both paths (the bench is about launching, not the first sync).
            timed_all([[PIPPA, "sync", host.name], rsync], env, repo)
            if args.baseline:
                timed_all([[args.baseline, "sync", host.name]], env, repo)
            pippa_s: list[float] = []
            hand_s: list[float] = []
            ab: dict[str, tuple[list[float], list[float]]] = {"baseline": ([], []), "this": ([], [])}
            for i in range(args.repeat):
                pippa = [PIPPA, "run", "--no-wait", "--host", host.name, "-n", f"p{i}", "--cmd", "sleep 60"]
                hand = [*ssh, host.ssh_alias, f"tmux new-session -d -s h{i} 'sleep 60'"]
                wall, cpu, _ = timed_cpu(pippa, env, repo, timeout=300)
                pippa_s.append(wall)
                ab["this"][0].append(wall)
                ab["this"][1].append(cpu)
                hand_s.append(timed_all([rsync, hand], env, repo))
                if args.baseline:
                    other = [args.baseline, *pippa[1:6], f"b{i}", *pippa[7:]]
                    wall, cpu, _ = timed_cpu(other, env, repo, timeout=300)
                    ab["baseline"][0].append(wall)
                    ab["baseline"][1].append(cpu)
            host.run_as_user(["tmux", "kill-server"])
        p, h = statistics.median(pippa_s), statistics.median(hand_s)
        print(f"launch bench: ready loopback host, {args.files}-file repo, medians of {args.repeat}")
        print(f"  pippa run --cmd 'sleep 60'         {p:7.3f} s")
        print(f"  rsync -az + ssh tmux new-session   {h:7.3f} s")
        print(f"  ratio pippa/hand {p / h:5.2f}x   goal <= 0.8x {'ok' if p / h <= 0.8 else 'MISSED'}")
        if args.baseline:
            (bw, bc), (tw, tc) = ([statistics.median(x) for x in ab[k]] for k in ("baseline", "this"))
            print(
                f"  this vs baseline: wall {tw:.3f} / {bw:.3f} s = {tw / bw:.2f}x, "
                f"cpu {tc:.3f} / {bc:.3f} s = {tc / bc:.2f}x; load {os.getloadavg()[0]:.1f}"
            )
    finally:
        world.close()


if __name__ == "__main__":
    os.umask(0o022)
    main()
