"""The facts about an attempt that the run supervisor classifies (pippa_contract.failures) and acts on
(pippa_contract.retry): its log tail, the kernel's log since it started, its cgroup's OOM kills, its
step times (for the stall threshold, pippa_contract.stall) and its batch settings (for an OOM retry).

Each reader returns what it can and nothing when the host will not say (a kernel log a user may not
read, a cgroup without the memory controller): the classifier then decides from the rest.
Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from pippa_contract import diskspace, stall
from pippa_contract import exitcodes as ec
from pippa_contract import failures as fc
from pippa_contract import retry as rp
from pippa_contract import rundir as rd
from pippa_contract.xids import boot_time, logged_at, pci_key

TAIL_BYTES = 65536
KERNEL_TIMEOUT_S = 5.0


def log_tail(path: str, start: int, nbytes: int = TAIL_BYTES) -> list[str]:
    """The last lines of ``path`` written after byte ``start``."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(start, size - nbytes))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def kernel_lines(since: float) -> list[str]:
    """Kernel log lines from ``since`` (unix s) on: ``dmesg`` (its ``[seconds since boot]`` stamps
    placed with /proc/uptime), else ``journalctl -k``; none when neither may be read."""
    boot = boot_time()
    try:
        p = subprocess.run(["dmesg"], capture_output=True, timeout=KERNEL_TIMEOUT_S)
        if p.returncode == 0 and boot is not None:
            out = []
            for line in p.stdout.decode(errors="replace").splitlines():
                at = logged_at(line, boot)
                if at is not None and at >= since - 1.0:
                    out.append(line)
            return out
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        argv = ["journalctl", "-k", "-q", "--no-pager", "-o", "short", f"--since=@{int(since)}"]
        p = subprocess.run(argv, capture_output=True, timeout=KERNEL_TIMEOUT_S)
        return p.stdout.decode(errors="replace").splitlines() if p.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        return []


def cgroup_oom_kills(pid: int | None = None) -> int | None:
    """The ``oom_kill`` count of the memory cgroup of ``pid`` (this process by default): cgroup v2's
    memory.events, v1's memory.oom_control. None where it cannot be read."""
    try:
        with open(f"/proc/{pid or 'self'}/cgroup") as f:
            entries = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    for _, controllers, path in entries:
        if controllers == "":
            candidate = os.path.join("/sys/fs/cgroup", path.lstrip("/"), "memory.events")
        elif "memory" in controllers.split(","):
            candidate = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.oom_control")
        else:
            continue
        try:
            with open(candidate) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        except OSError:
            continue
    return None


def attempt_records(metrics_path: str, since: float) -> tuple[list[float], dict[str, object] | None]:
    """The ``time`` of each step line written since ``since`` (this attempt's), and the config of the
    newest header line (the resolved recipe: its batch settings)."""
    times: list[float] = []
    config = None
    try:
        with open(metrics_path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                when = rec.get("time")
                if rec.get("type") == "header":
                    config = rec.get("config") if isinstance(rec.get("config"), dict) else config
                    times = []
                elif rec.get("type") == "step" and isinstance(when, (int, float)) and when >= since:
                    times.append(float(when))
    except OSError:
        pass
    return times, config


def stall_threshold(metrics_path: str, since: float, setting: object) -> float | None:
    """The attempt's stall threshold now (pippa_contract.stall), floor from the environment."""
    times, _ = attempt_records(metrics_path, since)
    return stall.threshold(times, setting, stall.floor_s())


def batch_of(metrics_path: str) -> tuple[int, int] | None:
    """(per-device batch, gradient accumulation) of the newest header's resolved config."""
    _, header = attempt_records(metrics_path, 0.0)
    config: object = header
    if isinstance(header, dict) and isinstance(header.get("config"), dict):
        config = header["config"]  # training_core's header: {"recipe", "platform", ..., "config": resolved}
    train = config.get("train") if isinstance(config, dict) else None
    if not isinstance(train, dict):
        return None
    b, g = train.get("per_device_train_batch_size"), train.get("gradient_accumulation_steps")
    return (int(b), int(g)) if isinstance(b, int) and isinstance(g, int) else None


def decide(
    doc: dict[str, object], verdict: fc.Verdict, policy: dict[str, object], batch: tuple[int, int] | None
) -> rp.Decision:
    """What to do after ``verdict``, given the classes of the run's earlier attempts in ``doc`` (the
    attempt just ended is its last entry)."""
    raw = doc.get("attempts")
    attempts = raw if isinstance(raw, list) else []
    classes = [str(a.get("class") or fc.CRASH) for a in attempts[:-1] if isinstance(a, dict)]
    return rp.decide(
        [*classes, verdict.cls],
        max_attempts=int(str(policy.get("max_attempts") or 1)),
        infra_retries=int(str(policy.get("infra_retries", rp.INFRA_RETRIES))),
        retry_diverged=bool(policy.get("retry_diverged")),
        on_oom=str(policy.get("on_oom") or "halve"),
        batch=batch,
    )


def diverged_error(metrics_path: str) -> str | None:
    """The metrics end line's error when the run ended diverged (training_core writes it)."""
    tail = log_tail(metrics_path, 0, 8192)
    for raw in reversed(tail):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "end":
            if rec.get("status") == "diverged":
                return str(rec.get("error") or "a loss or reward became NaN or infinite")
            return None
        if isinstance(rec, dict) and rec.get("type") == "header":
            return None
    return None


def disk_full(run_dir: str) -> str | None:
    """``0 B free on /data`` when the run's file system has next to no space left (diskspace)."""
    free = diskspace.free_bytes(run_dir)
    return diskspace.free_text(run_dir) if free is not None and free < diskspace.FULL_BELOW else None


def verdict(
    run_dir: str,
    attempt: dict[str, object],
    code: int | None,
    *,
    stopped: bool = False,
    lost: bool = False,
    stalled_reason: str | None = None,
    oom_kills_before: int | None = None,
    pids: list[int] | None = None,
) -> fc.Verdict:
    """The class of the attempt that just ended, from everything this host can tell about it."""
    saved = None if stopped or lost else ec.saved_class(code)
    if saved is not None:  # the trainer's own status after an outside engine's save signal
        return fc.Verdict(saved, f"saved and stopped at the {ec.SIGNAL_NAMES[saved]} signal (exit {code})")
    start = attempt.get("start")
    since = float(start) if isinstance(start, (int, float)) else time.time()
    offset = attempt.get("log_offset")
    after = cgroup_oom_kills()
    rose = after - oom_kills_before if after is not None and oom_kills_before is not None else 0
    kernel = kernel_lines(since) if code is not None and code != 0 and not stopped else []
    return fc.classify(
        fc.AttemptFacts(
            exit_code=code,
            log_tail=log_tail(
                os.path.join(run_dir, rd.OUTPUT_LOG), int(offset) if isinstance(offset, int) else 0
            ),
            stopped=stopped,
            lost=lost,
            stalled_reason=stalled_reason,
            diverged_error=diverged_error(os.path.join(run_dir, rd.METRICS)),
            kernel_lines=kernel,
            cgroup_oom_kills=max(0, rose),
            pids=pids or [],
            root=os.path.dirname(os.path.dirname(run_dir.rstrip("/"))),
            disk_full=disk_full(run_dir) if code not in (None, 0) and not stopped else None,
        )
    )


def gpu_index(pci: str) -> int | None:
    """The nvidia-smi index of the GPU an Xid line names (``PCI:0000:3b:00``), from nvidia-smi's
    ``index,pci.bus_id`` (``00000000:3B:00.0``); None when nvidia-smi cannot say."""
    want = pci_key(pci)
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            timeout=KERNEL_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in p.stdout.decode(errors="replace").splitlines() if p.returncode == 0 else []:
        index, _, bus = (x.strip() for x in line.partition(","))
        if index.isdigit() and pci_key(bus) == want:
            return int(index)
    return None
