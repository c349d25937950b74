"""A real single-node SLURM cluster for the tests, started as root from Debian's packages.

``start_cluster(base)`` runs munged as the munge user (its own key and socket under ``base``), then
``slurmctld -D`` and ``slurmd -D`` with a generated slurm.conf: one node (this machine, its CPUs, two
fake GPUs for ``--gres=gpu:N`` from empty device files in gres.conf), one partition ``debug``,
ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, no accounting, SlurmUser=root, free ports,
every state and log file under ``base``. Client commands (sbatch, squeue, scontrol, scancel, srun)
find it through ``SLURM_CONF`` (``Cluster.env``). Nothing touches /etc/slurm or a system munged.

``client_wrapper(tool)`` is a script that runs a client command against this cluster, for users
whose environment has no SLURM_CONF (the loopback SSH hosts' users).
``why_unavailable()`` names what is missing (root, the packages), for a skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun")
NODE_GPUS = 2


def why_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "SLURM tests need root (they start munged, slurmctld and slurmd); CI runs as root"
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"SLURM tests need {', '.join(missing)}: scripts/setup --test-deps installs them"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "SLURM tests need the munge user (Debian package munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class Cluster:
    base: Path
    node: str
    conf: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    munged_pid: int | None = None  # munged forks itself into the background
    munge_dir: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.client_env(), capture_output=True, text=True, timeout=30, check=check
        )

    def client_wrapper(self, tool: str) -> str:
        return f'#!/bin/sh\nSLURM_CONF={self.conf} exec {shutil.which(tool) or tool} "$@"\n'

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.base.glob("*.log"))
        )

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.munged_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.munged_pid, signal.SIGTERM)
        if self.munge_dir is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)


def _slurm_conf(base: Path, mdir: Path, node: str, cpus: int, ctld_port: int, slurmd_port: int) -> str:
    return f"""ClusterName=pippatest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={mdir}/munge.socket
StateSaveLocation={base}/ctld-state
SlurmdSpoolDir={base}/slurmd-spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MinJobAge=600
KillWait=30
InactiveLimit=0
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:{NODE_GPUS} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def start_cluster(base: Path, timeout: float = 60) -> Cluster:
    """munged, slurmctld and slurmd under ``base``; returns once the node accepts jobs. ``base`` and
    its parents must be readable by every user that submits (slurm.conf is read by each client)."""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    node = socket.gethostname().split(".")[0]
    munge = pwd.getpwnam("munge")
    # munged runs as the munge user, which cannot enter pytest's 0700 temp tree: its own directory
    mdir = Path(tempfile.mkdtemp(prefix="pippa-munge-"))
    mdir.chmod(0o755)  # every user's client reaches the socket
    key = mdir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for p in (mdir, key):
        os.chown(p, munge.pw_uid, munge.pw_gid)
    for d in ("ctld-state", "slurmd-spool", "dev"):
        (base / d).mkdir()
    for i in range(NODE_GPUS):
        (base / "dev" / f"nvidia{i}").touch()  # slurmd only needs the files for --gres=gpu:N
    cpus = os.cpu_count() or 1
    conf = base / "slurm.conf"
    conf.write_text(_slurm_conf(base, mdir, node, cpus, _free_port(), _free_port()))
    (base / "gres.conf").write_text(f"NodeName={node} Name=gpu File={base}/dev/nvidia[0-{NODE_GPUS - 1}]\n")
    cluster = Cluster(base, node, conf, munge_dir=mdir)
    env = cluster.client_env()
    try:
        r = subprocess.run(
            [
                "runuser",
                "-u",
                "munge",
                "--",
                _bin("munged"),
                f"--socket={mdir}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={mdir}/munged.pid",
                f"--log-file={mdir}/munged.log",
                f"--seed-file={mdir}/munged.seed",
                "--force",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )  # (munged forks into the background once its socket is ready)
        if r.returncode != 0:
            raise RuntimeError(f"munged did not start: {r.stderr.strip()}")
        pid_file, deadline = mdir / "munged.pid", time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.munged_pid = int(pid_file.read_text().split()[0])
        for argv in ([_bin("slurmctld"), "-D", "-i"], [_bin("slurmd"), "-D", "-N", node]):
            out = (base / f"{Path(argv[0]).name}.stdout.log").open("wb")
            cluster.procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in cluster.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a SLURM daemon exited ({p.args}):\n{cluster.logs()}")
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated"):
                return cluster
            time.sleep(0.3)
        raise RuntimeError(f"the SLURM node did not come up in {timeout:.0f}s:\n{cluster.logs()}")
    except BaseException:
        cluster.close()
        raise
