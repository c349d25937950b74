"""What a stalled attempt was doing, captured before it is stopped: ``runs/<id>/forensics/attempt-N/``.

- ``stack-<pid>.json``: ``py-spy dump --json`` of every Python process of the attempt (py-spy, from the
  ``train`` extra, reads another process's stack with ptrace without stopping it for long), and
  ``stacks.txt``, the same as text, rank by rank;
- ``processes.json``: ``[{"pid", "rank", "argv", "stack": file or null, "error": why not}]``;
- ``nvidia-smi.txt``: ``nvidia-smi``'s view, where there is one;
- ``nccl_trace_rank_<R>``: PyTorch's Flight Recorder dump of each rank that uses NCCL. The supervisor
  starts such runs with ``flight_recorder_env`` (a trace buffer, and a named pipe per rank that makes
  the rank dump when written to: ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``, torch/csrc/distributed/c10d/
  ProcessGroupNCCL.cpp's ``DumpPipe``); ``capture`` writes to each pipe it finds;
- ``summary.json``: ``{"dir", "captured_at", "suspect": pippa_contract.stacks.Suspect, "stacks":
  {"rank/pid": [frame, ...]}, "nvidia_smi", "flight_recorder", "elapsed_s"}``, which the supervisor
  also copies into attempts.json.

The dumps run side by side, each under a time cap, so an 8-process run is captured in seconds.
Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass

from pippa_contract import stacks as st

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass

DUMP_TIMEOUT_S = 8.0
TRACE_BUFFER = "2000"
PIPE_STEM = ".nccl_dump_rank_"  # in the run directory: <stem><rank>.pipe (ProcessGroupNCCL's DumpPipe)
TRACE_STEM = "nccl_trace_rank_"  # in the attempt's forensics directory: <stem><rank>


def attempt_dir(run_dir: str, attempt: int) -> str:
    return os.path.join(run_dir, "forensics", f"attempt-{attempt}")


def flight_recorder_env(run_dir: str, attempt: int) -> dict[str, str]:
    """The environment an attempt starts with so that its NCCL ranks keep a Flight Recorder trace and
    dump it on a watchdog timeout or when ``capture`` asks (no effect on a process without NCCL)."""
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": TRACE_BUFFER,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": os.path.join(attempt_dir(run_dir, attempt), TRACE_STEM),
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": os.path.join(run_dir, PIPE_STEM),
    }


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from /proc's parent links), oldest first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return out


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return {}
    out = {}
    for entry in raw.split(b"\0"):
        key, eq, value = entry.partition(b"=")
        if eq:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def argv_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def rank_of(env: dict[str, str]) -> int | None:
    """A process's global rank (torchrun and accelerate set RANK in every worker); None: not a rank."""
    value = env.get("RANK")
    return int(value) if value is not None and value.isdigit() else None


def is_python(argv: list[str]) -> bool:
    return bool(argv) and "python" in os.path.basename(argv[0])


def find_py_spy(argvs: list[list[str]], extra: list[str]) -> str | None:
    """py-spy beside the run's Python (the ``train`` extra installs it into that environment), else
    in ``extra`` directories or on PATH."""
    dirs = [os.path.dirname(a[0]) for a in argvs if a and os.path.isabs(a[0])]
    dirs += extra + os.environ.get("PATH", "").split(os.pathsep)
    for d in dirs:
        path = os.path.join(d, "py-spy")
        if d and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def trigger_flight_recorder(run_dir: str, ranks: list[int]) -> list[str]:
    """Write to each rank's dump pipe (non-blocking: a pipe nobody reads is skipped). The pipes written."""
    done = []
    for rank in ranks:
        pipe = os.path.join(run_dir, f"{PIPE_STEM}{rank}.pipe")
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # no such pipe (no NCCL process group), or no reader
        try:
            os.write(fd, b"1\n")
            done.append(pipe)
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


def smi_view(out_dir: str) -> str | None:
    try:
        p = subprocess.run(["nvidia-smi"], capture_output=True, timeout=DUMP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = os.path.join(out_dir, "nvidia-smi.txt")
    with open(path, "wb") as f:
        f.write(p.stdout + p.stderr)
    return path


@dataclass
class Proc:
    """One process of the attempt, as processes.json lists it."""

    pid: int
    rank: int | None
    argv: list[str]
    stack: str | None = None  # its stack-<pid>.json
    error: str | None = None  # why there is none


def capture(
    run_dir: str, attempt: int, root_pid: int, extra_dirs: list[str] | None = None
) -> dict[str, object]:
    """Capture the attempt whose job is ``root_pid`` (see the module's docstring); the summary."""
    started, captured_at = time.monotonic(), time.time()
    out_dir = attempt_dir(run_dir, attempt)
    os.makedirs(out_dir, exist_ok=True)
    procs = []
    for pid in descendants(root_pid):
        argv = argv_of(pid)
        if is_python(argv):
            procs.append(Proc(pid, rank_of(environ(pid)), argv))
    ranks = sorted({p.rank for p in procs if p.rank is not None})
    fr_pipes = trigger_flight_recorder(run_dir, ranks)
    spy = find_py_spy([p.argv for p in procs], list(extra_dirs or []))
    running = {}
    for p in procs:
        if spy is None:
            p.error = "py-spy not found (pip install py-spy: the train extra has it)"
            continue
        cmd = [spy, "dump", "--pid", str(p.pid), "--json"]
        running[p.pid] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    read: list[st.ProcessStack] = []
    for p in procs:
        proc = running.get(p.pid)
        if proc is None:
            continue
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            p.error = "py-spy timed out"
            continue
        try:
            dump = json.loads(out)
        except ValueError:
            p.error = (err.decode(errors="replace").strip().splitlines() or ["py-spy failed"])[-1][:300]
            continue
        name = f"stack-{p.pid}.json"
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(dump, f)
        p.stack = name
        read.append(st.from_py_spy(p.pid, p.rank, dump))
    smi = smi_view(out_dir)
    suspect = st.name_suspect(read)
    by_rank = {f"{'launcher' if s.rank is None else s.rank}/{s.pid}": st.stuck_frames(s) for s in read}
    with open(os.path.join(out_dir, "stacks.txt"), "w") as f:
        for key, frames in sorted(by_rank.items()):
            f.write(f"== {'rank ' + key if not key.startswith('launcher') else key} ==\n")
            f.write("".join(f"  {fr}\n" for fr in frames) + "\n")
    with open(os.path.join(out_dir, "processes.json"), "w") as f:
        json.dump([asdict(p) for p in procs], f)
    summary = {
        "dir": os.path.relpath(out_dir, run_dir),
        "captured_at": captured_at,
        "suspect": suspect.to_json(),
        "stacks": by_rank,
        "nvidia_smi": smi is not None,
        "flight_recorder": [os.path.basename(x) for x in fr_pipes],
        "elapsed_s": round(time.monotonic() - started, 2),
    }
    tmp = os.path.join(out_dir, f"summary.json.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f)
    os.replace(tmp, os.path.join(out_dir, "summary.json"))
    return summary
