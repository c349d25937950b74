"""Why an attempt ended: the failure class of every attempt, from the facts the host supervisor has.

One pure function, ``classify(AttemptFacts) -> Verdict``, holds every rule; the supervisor writes its
verdict into attempts.json and ``ps``, ``dash``, alerts and ``pippa why`` read it from there.
The rules are tried in order (the first that holds wins) and each is tested against the exact lines
PyTorch, NCCL, CUDA and the Linux kernel print (tests/contract/test_failures.py quotes their sources):

1. ``stopped``   the user asked (``pippa stop``, Ctrl-C: ``stop_requested`` or the supervisor's SIGINT)
   and it did not exit 0 (a trainer whose last step was under way saves it and completes: exit 0)
2. ``lost``      the session vanished with no exit code (reboot, ``tmux kill-server``)
3. ``stalled``   the stall watch ended it (no new metrics line for the threshold)
4. ``completed`` exit 0
5. ``gpu-fault`` a new NVIDIA Xid of a hardware kind (``pippa_contract.xids``), or an uncorrectable ECC
   error, during the attempt
6. ``host-oom``  killed by SIGKILL, and the kernel's OOM killer (kernel log, cgroup oom_kill) says so
6b. ``disk-full`` the run's file system was full (or the quota spent) when it ended: ENOSPC / EDQUOT in
   the log, or next to no free space left there (pippa_contract.diskspace); never retried (it would
   fail the same way until space is freed)
7. ``diverged``  the metrics end line says NaN/inf
8. ``config``    exit 2 (training_core's bad recipe or setting)
9. ``oom``       CUDA / torch out-of-memory in the log
10. ``nccl``     an NCCL error or the ProcessGroupNCCL watchdog's timeout in the log
11. ``crash``    anything else: the exception type, message and last frame of the last traceback
    (``crash: KeyError 'answer' at data/loaders.py:118``), else the last line of the log.

Standard library only, python3 >= 3.8 (shipped to hosts in the agent bundle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pippa_contract.xids import events as xid_events

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

COMPLETED, STOPPED, CONFIG, DIVERGED = "completed", "stopped", "config", "diverged"
OOM, HOST_OOM, GPU_FAULT, NCCL = "oom", "host-oom", "gpu-fault", "nccl"
STALLED, LOST, CRASH = "stalled", "lost", "crash"
DISK_FULL = "disk-full"
# Its --budget was spent: the supervisor saved and stopped it, never retried (pippa_agent.supervise.budget).
BUDGET = "budget"
CLASSES: tuple[str, ...] = (
    COMPLETED,
    STOPPED,
    CONFIG,
    DIVERGED,
    OOM,
    HOST_OOM,
    GPU_FAULT,
    NCCL,
    STALLED,
    LOST,
    CRASH,
    DISK_FULL,
    BUDGET,
)
# The infrastructure's fault: retried without spending --retry, up to --infra-retries.
INFRA = (LOST, NCCL, STALLED)
# Never retried: a retry would end the same way, the user asked, or its budget is spent.
FINAL = (CONFIG, DIVERGED, STOPPED, DISK_FULL, BUDGET)

USAGE_EXIT = 2
SIGKILL_EXIT = 128 + 9
LINE_MAX = 300

# torch.OutOfMemoryError (torch >= 2.5; torch.cuda.OutOfMemoryError before), whose message is
# c10/cuda/CUDACachingAllocator.cpp's "CUDA out of memory. Tried to allocate ..."; a kernel launch that
# fails for memory says "CUDA error: out of memory" (c10/cuda/CUDAException.h, cudaErrorMemoryAllocation).
_OOM = re.compile(
    r"(torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory\. Tried to allocate|CUDA error: out of memory"
    r"|HIP out of memory\. Tried to allocate)"
)
# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp's watchdog ("[Rank R] Watchdog caught collective
# operation timeout: WorkNCCL(SeqNum=..."), NCCLUtils.hpp's C10D_NCCL_CHECK ("NCCL error in: FILE:LINE,
# <ncclGetErrorString> ..., NCCL version X"), torch.distributed.DistBackendError, and NCCL's own
# ncclResult_t names (nccl/src/include/nccl.h.in).
_NCCL = re.compile(
    r"(Watchdog caught collective operation timeout|NCCL error in: |DistBackendError"
    r"|nccl(System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error"
    r"|Some NCCL operations have failed or timed out|NCCL communicator was aborted|NCCL WARN )"
)
# mm/oom_kill.c: __oom_kill_process prints "%s: Killed process %d (%s) total-vm:..." where %s is
# "Out of memory" or "Memory cgroup out of memory"; dump_oom_victim prints "oom-kill:constraint=...,pid=%d".
_KERNEL_OOM_KILLED = re.compile(r"(?:Out of memory|out of memory): Killed process (\d+) \(([^)]*)\)")
_KERNEL_OOM_SUMMARY = re.compile(r"oom-kill:constraint=[^\n]*?[,:]pid=(\d+)")
# cudaErrorECCUncorrectable's message (CUDA runtime API, cudaGetErrorString).
_ECC = re.compile(r"uncorrectable ECC error encountered")
# strerror(ENOSPC) and strerror(EDQUOT), as Python's OSError and coreutils print them, and our own line.
_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|^disk full: ")
_RANK_PREFIX = re.compile(r"^\[(?:rank|Rank|default)\s*\d+\]:\s?")
_GLOG_PREFIX = re.compile(
    r"^\[[IWEF]\d{4} [\d:.]+ [^\]]*\]\s*"
)  # c10's glog-style "[E1218 20:27:21.42 File.cpp:629] "
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")  # the line right after a traceback's frames
# A launcher's error about a child (torchrun, accelerate launch): the rank's traceback above says more.
_WRAPPER_EXC = ("ChildFailedError", "CalledProcessError")


@dataclass(frozen=True)
class AttemptFacts:
    """What the supervisor knows when an attempt ends. Lines are the attempt's own (output.log after its
    offset, the kernel log since it started)."""

    exit_code: int | None  # the shell's view (128 + signal when killed); None: no exit code (lost)
    log_tail: Sequence[str] = ()  # the last lines of the attempt's output.log
    stopped: bool = False  # the user asked it to stop
    lost: bool = False  # its session went away (SIGHUP, reboot) with nobody asking
    stalled_reason: str | None = None  # the stall watch's reason when it ended the attempt
    diverged_error: str | None = None  # the metrics end line's error when its status is diverged
    kernel_lines: Sequence[str] = ()  # kernel log lines (dmesg / journalctl -k) during the attempt
    cgroup_oom_kills: int = 0  # the rise of memory.events' oom_kill in the run's cgroup
    pids: Sequence[int] = ()  # the attempt's processes (to match the kernel's OOM victim)
    root: str = ""  # the repo root, to shorten a traceback's file to a relative path
    disk_full: str | None = None  # "0 B free on /data": the run's file system was full when it ended


@dataclass(frozen=True)
class Verdict:
    """An attempt's class, the one line that says why, and the lines that decided it."""

    cls: str
    reason: str
    lines: tuple[str, ...] = field(default_factory=tuple)
    gpu: str | None = None  # gpu-fault: the PCI address the Xid named

    def to_json(self) -> dict[str, object]:
        return {"class": self.cls, "reason": self.reason, "lines": list(self.lines), "gpu": self.gpu}


def strip_rank(line: str) -> str:
    """A line without torchrun's ``[rank1]:`` prefix and c10's log prefix."""
    return _GLOG_PREFIX.sub("", _RANK_PREFIX.sub("", line.rstrip("\n")))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LINE_MAX else text[: LINE_MAX - 1] + "…"


def _first(pattern: re.Pattern[str], lines: Sequence[str]) -> str | None:
    """The first line ``pattern`` finds, preferring one that is not indented: a traceback quotes its
    source lines indented (``    raise torch.OutOfMemoryError(``), while the error itself starts the line."""
    hits = [ln for ln in lines if pattern.search(ln)]
    flush = [ln for ln in hits if not strip_rank(ln)[:1].isspace()]
    best = flush or hits
    return best[0] if best else None


def _relative(path: str, root: str) -> str:
    if root and path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else path


@dataclass(frozen=True)
class Crash:
    """The last traceback of a log: its exception and the frame it was raised in."""

    exc_type: str
    message: str
    file: str | None
    line: int | None
    lines: tuple[str, ...]

    def describe(self) -> str:
        where = f" at {self.file}:{self.line}" if self.file else ""
        msg = f" {self.message}" if self.message else ""
        return _short(f"{self.exc_type}{msg}{where}")


def last_traceback(lines: Sequence[str], root: str = "") -> Crash | None:
    """The last Python traceback in ``lines`` that is not a launcher's report about a child: its
    exception line and innermost frame. None when the log has no complete traceback."""
    clean = [strip_rank(x) for x in lines]
    found: list[Crash] = []
    i = 0
    while i < len(clean):
        if not clean[i].startswith("Traceback (most recent call last)"):
            i += 1
            continue
        frame, frame_line, j = None, "", i + 1
        while j < len(clean):
            m = _FRAME.match(clean[j])
            if m:
                frame, frame_line = (m.group(1), int(m.group(2))), clean[j].strip()
            elif clean[j] and not clean[j].startswith((" ", "\t")):
                break
            j += 1
        if j < len(clean):
            e = _EXC.match(clean[j].strip())
            if e:
                name = e.group(1).rsplit(".", 1)[-1]
                file = _relative(frame[0], root) if frame else None
                decisive = (frame_line, clean[j].strip()) if frame_line else (clean[j].strip(),)
                found.append(
                    Crash(name, (e.group(2) or "").strip(), file, frame[1] if frame else None, decisive)
                )
        i = j + 1 if j > i else i + 1
    for crash in reversed(found):
        if crash.exc_type not in _WRAPPER_EXC:
            return crash
    return found[-1] if found else None


def oom_victims(kernel_lines: Sequence[str]) -> list[tuple[int, str]]:
    """``(pid, line)`` for each process the kernel's OOM killer took."""
    out = []
    for line in kernel_lines:
        m = _KERNEL_OOM_KILLED.search(line) or _KERNEL_OOM_SUMMARY.search(line)
        if m:
            out.append((int(m.group(1)), line.strip()))
    return out


def _last_line(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        text = strip_rank(line).strip()
        if text and not text.startswith("pippa: "):
            return text
    return None


def classify(f: AttemptFacts) -> Verdict:
    """The class of an ended attempt (the rules in order; see the module's docstring)."""
    log = [ln for ln in f.log_tail if not ln.startswith("pippa: ")]
    if f.stopped and f.exit_code != 0:
        return Verdict(STOPPED, "stopped by the user")
    if f.exit_code is None or f.lost:
        return Verdict(LOST, "the session ended with no exit code (reboot, tmux killed)")
    if f.stalled_reason:
        return Verdict(STALLED, f.stalled_reason)
    if f.exit_code == 0:
        return Verdict(COMPLETED, "exit 0")
    hardware = [e for e in xid_events(f.kernel_lines) if e.hardware]
    if hardware:
        e = hardware[0]
        return Verdict(GPU_FAULT, _short(f"Xid {e.xid} on GPU PCI:{e.pci}"), (e.line,), gpu=f"PCI:{e.pci}")
    ecc = _first(_ECC, log)
    if ecc is not None:
        return Verdict(GPU_FAULT, _short(strip_rank(ecc).strip()), (ecc.strip(),))
    if f.exit_code == SIGKILL_EXIT:
        victims = [v for v in oom_victims(f.kernel_lines) if not f.pids or v[0] in f.pids]
        if victims:
            return Verdict(
                HOST_OOM, f"the kernel's OOM killer killed pid {victims[0][0]}", tuple(v[1] for v in victims)
            )
        if f.cgroup_oom_kills > 0:
            return Verdict(
                HOST_OOM,
                f"the run's cgroup counted {f.cgroup_oom_kills} OOM kill(s)",
                (f"memory.events oom_kill +{f.cgroup_oom_kills}",),
            )
    ours = [ln for ln in log if strip_rank(ln).startswith("disk full: ")]  # the writer's own line first
    full = ours[0] if ours else _first(_DISK_FULL, log)
    if f.disk_full or full is not None:
        said = strip_rank(full).strip() if full is not None else None
        where = f" ({f.disk_full})" if f.disk_full and (said is None or f.disk_full not in said) else ""
        reason = said[len("disk full: ") :] if said and said.startswith("disk full: ") else said
        return Verdict(
            DISK_FULL,
            _short(f"{reason or 'no space left on the run directory'}{where}"),
            (said,) if said else (),
        )
    if f.diverged_error:
        return Verdict(DIVERGED, _short(f.diverged_error))
    if f.exit_code == USAGE_EXIT:
        line = _last_line(log)
        return Verdict(
            CONFIG, _short(line or "exit 2: a configuration or usage error"), (line,) if line else ()
        )
    oom = _first(_OOM, log)
    if oom is not None:
        text = strip_rank(oom).strip()
        return Verdict(OOM, _short(text), (text,))
    nccl = [strip_rank(x).strip() for x in log if _NCCL.search(x) and not strip_rank(x)[:1].isspace()]
    if nccl:
        return Verdict(NCCL, _short(nccl[0]), tuple(nccl[:3]))
    crash = last_traceback(log, f.root)
    if crash is not None:
        return Verdict(CRASH, crash.describe(), crash.lines)
    line = _last_line(log)
    if f.exit_code > 128:
        sig = f"killed by {_signal_name(f.exit_code - 128)}"
        return Verdict(CRASH, _short(f"{sig} (last line: {line})" if line else sig), (line,) if line else ())
    return Verdict(CRASH, _short(line or f"exit {f.exit_code}"), (line,) if line else ())


def _signal_name(n: int) -> str:
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def label(cls: str, reason: str | None) -> str:
    """How ``ps`` and alerts show an ended attempt: ``stalled (no new metrics line for 15m)``,
    ``crash: KeyError 'answer' at data/loaders.py:118``."""
    if cls == CRASH and reason:
        return f"crash: {reason}"
    return f"{cls} ({reason})" if reason else cls
