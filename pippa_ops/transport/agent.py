"""The host side of pippa: one stdlib-only Python program that answers each remote operation.

The laptop (``agent_client``) starts it with ONE fixed command, ``python3 -S -I -c BOOTSTRAP``, and
sends framed JSON requests (``<n>\\n`` + n bytes) on stdin. The bootstrap runs the compiled agent
cached on the host (``~/.cache/pippa``, by content hash, see ``agent_client``) or, on first use,
receives it on stdin. One agent process then answers several requests in turn (``serve``): a sync's
listing and its marker, a launch's listing and start, are one Python start-up and one channel.

Verbs answer with one JSON line on stdout (``{"error": kind, "message": ...}`` for an expected
failure), or with a raw byte stream (``follow``, ``read``). A verb that reads the rest of stdin (the
sync stream of ``sync_apply``; ``follow``, for which its end means the client went away) or streams
its answer is the last of its process. The host ``local`` runs the same program through
``LocalTransport``, and the unit tests call the functions below directly.

Runs on python3 >= 3.8 with the standard library only: it must not import pippa_ops or anything else
that is not on a bare host (a test parses it with ``feature_version=(3, 8)``). Start-up time counts:
modules only some verbs need (subprocess, shutil, tempfile, threading) are imported where used.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing subprocess costs every request ~10 ms
    import subprocess

# Kept in step with pippa_ops.transport.shell / pippa_ops.runs.tmux (this file cannot import them).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
LIST_FORMAT = "#{session_name}|#{session_created}|#{session_attached}|#{session_windows}|#{session_id}"
PROTECTED_TOP = (".pippa", "runs", ".venv")
STAGE_MAX_AGE_S = 86400.0
TAIL_BYTES = 65536
# Non-interactive ssh commands do not read ~/.profile: uv's usual homes are added for lookups.
EXTRA_PATH = ("~/.local/bin", "~/.cargo/bin")
_ERROR_LINE = re.compile(r"(Error|Exception|Traceback|error:|FAILED|Killed|[Ff]atal)")


class AgentError(Exception):
    """An expected failure, answered as ``{"error": kind, "message": ...}``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# -- small helpers --------------------------------------------------------------------------------
def host_path(path: str) -> str:
    """``~`` and ``~/x`` made absolute; anything else must already be absolute."""
    if "\0" in path or "\n" in path:
        raise AgentError("usage", f"invalid path {path!r}")
    if path == "~" or path.startswith("~/"):
        return os.path.expanduser(path)
    if not path.startswith("/"):
        raise AgentError("usage", f"path must be absolute or start with ~/: {path!r}")
    return path


def search_path() -> str:
    extra = [os.path.expanduser(p) for p in EXTRA_PATH]
    return os.pathsep.join([*extra, os.environ.get("PATH", "/usr/bin:/bin")])


def which(tool: str) -> str | None:
    """``shutil.which`` on the search path, without importing shutil."""
    for d in search_path().split(os.pathsep):
        path = os.path.join(d, tool)
        if d and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run(
    argv: list[str], timeout: float = 60, input: bytes | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run an argument list (no shell); a missing tool reads as exit status 127."""
    import subprocess

    try:
        return subprocess.run(
            argv, input=input, stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True, timeout=timeout, env={**os.environ, "PATH": search_path(), **(env or {})},
        )  # fmt: skip
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, b"", (argv[0] + ": not found").encode())
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, b"", (argv[0] + ": timed out").encode())


def text(p: subprocess.CompletedProcess) -> str:
    return p.stdout.decode(errors="replace").strip()


def read_text(path: str, limit: int = 64) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace").strip()
    except OSError:
        return None


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """tmp + rename, so a reader sees the old file or the new one."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def tail_lines(path: str, nbytes: int = TAIL_BYTES) -> list[str]:
    """The complete lines among the last ``nbytes`` of a file (a partial first line is dropped)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - nbytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").split("\n")
    if size > nbytes:
        lines = lines[1:]
    return lines


def tmux(*args: str) -> subprocess.CompletedProcess:
    return run(["tmux", *args], timeout=30)


# -- probe ----------------------------------------------------------------------------------------
def probe(req: dict) -> dict:
    """Facts `pippa up` reports: tools, GPUs, python, free disk, and whether the code sandbox runs."""
    out: dict = {"python": ".".join(str(v) for v in sys.version_info[:3]), "python_path": sys.executable}
    t = tmux("-V")
    out["tmux"] = text(t) if t.returncode == 0 else None
    uv = run(["uv", "--version"], timeout=30)
    out["uv"] = text(uv) if uv.returncode == 0 else None
    out["curl"] = which("curl") is not None
    out["gpus"], out["driver"], out["cuda"] = [], None, None
    if which("nvidia-smi"):
        gpus = run(["nvidia-smi", "-L"])
        out["gpus"] = [g for g in text(gpus).splitlines() if g.strip()] if gpus.returncode == 0 else []
        drv = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        out["driver"] = next(iter(text(drv).splitlines()), None) if drv.returncode == 0 else None
        m = re.search(r"CUDA Version: *([0-9.]+)", text(run(["nvidia-smi"])))
        out["cuda"] = m.group(1) if m else None
    d = host_path(req.get("remote_dir") or "~")
    while not os.path.isdir(d):
        d = os.path.dirname(d)
    st = os.statvfs(d)
    out["free_disk_gb"] = round(st.f_bavail * st.f_frsize / 1024**3, 1)
    out["sandbox"] = sandbox_facts()
    return out


def sandbox_facts() -> dict:
    """Can this host run the code sandbox (bubblewrap)? And could `up` install it?"""
    root = os.geteuid() == 0
    sudo = False
    if not root and which("sudo"):
        sudo = run(["sudo", "-n", "true"], timeout=10).returncode == 0
    userns = None
    try:
        with open("/proc/sys/kernel/unprivileged_userns_clone") as f:
            userns = f.read().strip() == "1"
    except OSError:
        pass
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            if f.read().strip() == "0":
                userns = False
    except OSError:
        pass
    bwrap = which("bwrap")
    works, why = False, "bwrap (Debian package bubblewrap) is not installed"
    if bwrap:
        p = run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"], timeout=20)
        works = p.returncode == 0
        why = "" if works else (p.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
    import ctypes.util

    seccomp = ctypes.util.find_library("seccomp") is not None  # libseccomp2, for the sandbox's filter
    cgroups = cgroup_caps()
    # the strongest sandbox.isolation a code recipe can ask for here (training_core.sandbox.isolation)
    level = "unsafe"
    if works and seccomp:
        level = "strict" if cgroups else "rlimits"
    return {
        "bwrap": bwrap, "works": works, "why": why, "root": root, "sudo": sudo,
        "userns": userns, "apt": which("apt-get") is not None, "seccomp": seccomp,
        "cgroups": cgroups, "level": level,
    }  # fmt: skip


def cgroup_caps(root: str = "/sys/fs/cgroup") -> bool:
    """Whether root can cap a run's processes together here, found as the trainer finds it
    (training_core.sandbox.cgroups.CgroupSlots.create): a cgroup beside this process's own, with the
    memory and pids controllers, made and removed again. A writable /sys/fs/cgroup is not enough."""
    if os.geteuid() != 0:
        return False
    own = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f.read().splitlines():
                parts = line.split(":", 2)
                if len(parts) == 3:
                    for ctrl in parts[1].split(","):
                        own[ctrl] = parts[2].lstrip("/")
    except OSError:
        return False
    name = f"pippa-probe-{os.getpid()}"
    made = []
    try:
        v1 = all(c in own and os.path.isdir(os.path.join(root, c)) for c in ("memory", "pids"))
        if v1:
            for ctrl, control in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max")):
                d = os.path.join(root, ctrl, own[ctrl], name)
                os.mkdir(d)
                made.append(d)
                if not os.path.exists(os.path.join(d, control)):  # the kernel makes it in a real cgroup
                    return False
            return True
        if "" in own and os.path.exists(os.path.join(root, "cgroup.controllers")):
            base = os.path.normpath(os.path.join(root, own[""]))
            d = os.path.join(base if base == os.path.normpath(root) else os.path.dirname(base), name)
            os.mkdir(d)
            made.append(d)
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("+memory +pids")
            slot = os.path.join(d, "0")  # a run's slot: the kernel gives it the controllers' files
            os.mkdir(slot)
            made.append(slot)
            return all(os.path.exists(os.path.join(slot, c)) for c in ("memory.max", "pids.max"))
        return False
    except OSError:
        return False
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(d)


def install_bwrap(req: dict) -> dict:
    """``apt-get install bubblewrap`` as root or through passwordless sudo; then the probe again."""
    facts = sandbox_facts()
    if facts["works"]:
        return {"installed": False, "sandbox": facts}
    if not facts["apt"] or not (facts["root"] or facts["sudo"]):
        return {"installed": False, "sandbox": facts, "why": "needs root or passwordless sudo, and apt-get"}
    prefix = [] if facts["root"] else ["sudo", "-n"]
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    p = run([*prefix, *env, "apt-get", "install", "-y", "-q", "bubblewrap"], timeout=600)
    if p.returncode != 0:  # a stale package list is the usual reason
        run([*prefix, *env, "apt-get", "update", "-q"], timeout=600)
        p = run([*prefix, *env, "apt-get", "install", "-y", "-q", "bubblewrap"], timeout=600)
    why = "" if p.returncode == 0 else (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
    return {"installed": p.returncode == 0, "sandbox": sandbox_facts(), "why": why}


UV_INSTALLER = "https://astral.sh/uv/install.sh"
UV_VENV = "~/.local/share/pippa/uv-venv"


def last_line(p: subprocess.CompletedProcess) -> str:
    """The line that says why a step failed: the last error-looking line, else the last one."""
    lines = [ln.strip() for ln in (p.stderr + p.stdout).decode(errors="replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.lower().startswith(("hint:", "note:"))] or lines
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else f"exit status {p.returncode}"


def uv_version() -> str | None:
    p = run(["uv", "--version"], timeout=30)
    return text(p) if p.returncode == 0 else None


def install_uv(req: dict) -> dict:
    """uv for the user, in ~/.local/bin: astral's installer through curl, else pip in a private venv
    (PEP 668 forbids ``pip install --user`` into a distribution's python). Each try that failed is
    reported with the line that says why."""
    failures = []
    if which("curl"):
        dl = run(["curl", "-LsSf", UV_INSTALLER], timeout=120)  # the script, not piped: its status counts
        if dl.returncode != 0:
            failures.append("downloading the uv installer: " + last_line(dl))
        else:
            inst = run(["sh"], input=dl.stdout, timeout=300, env={"UV_NO_MODIFY_PATH": "1"})
            if inst.returncode != 0:
                failures.append("the uv installer: " + last_line(inst))
    else:
        failures.append("the uv installer needs curl, which is not installed")
    if not failures:
        found = uv_version()
        if found:
            return {"uv": found, "failures": []}
        failures.append("the uv installer finished but left no working uv in ~/.local/bin")
    venv = os.path.expanduser(UV_VENV)
    mk = run([sys.executable, "-m", "venv", venv], timeout=120)
    if mk.returncode != 0:
        failures.append("python3 -m venv: " + last_line(mk))
    else:
        pip = run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "uv"], timeout=600)
        if pip.returncode != 0:
            failures.append(f"pip install uv (in {UV_VENV}): {last_line(pip)}")
        else:
            bindir = os.path.expanduser("~/.local/bin")
            os.makedirs(bindir, exist_ok=True)
            link = os.path.join(bindir, "uv")
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join(venv, "bin", "uv"), link)
    return {"uv": uv_version(), "failures": failures}


# -- runs -----------------------------------------------------------------------------------------
def runs_dir(remote_dir: str) -> str:
    return os.path.join(host_path(remote_dir), "runs")


def last_records(path: str) -> tuple[list[dict], dict | None]:
    """The last two ``step`` records of a metrics.jsonl, and its ``end`` record when it is the last."""
    steps: list[dict] = []
    end = None
    for line in tail_lines(path):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a partial last line: ignored until its newline arrives
        if not isinstance(rec, dict):
            continue
        if rec.get("type") == "step":
            steps = [*steps[-1:], rec]
            end = None
        elif rec.get("type") == "end":
            end = rec
    return steps, end


def error_line(log: str) -> str | None:
    """The last line of the log that reads like an error, else its last non-empty line."""
    lines = [ln.strip() for ln in tail_lines(log) if ln.strip()]
    # srun's own "task 0: Exited with exit code N" only repeats the exit status: the job's line says why
    lines = [ln for ln in lines if not ln.startswith("srun: ")] or lines
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line[:300]
    return lines[-1][:300] if lines else None


def run_facts(d: str, summary: bool = False) -> dict | None:
    """One run directory's files as the laptop derives its state from them (None: not a run)."""
    try:
        with open(os.path.join(d, "run.json"), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        return None
    exit_text = read_text(os.path.join(d, "exit_code"), 16)
    run = {
        "run_id": os.path.basename(d),
        "meta": meta,
        "ctime": mtime(os.path.join(d, "run.json")),
        "tmux_session": read_text(os.path.join(d, "tmux_session")),
        "exit_code": exit_text,
        "ended": mtime(os.path.join(d, "exit_code")),
        "started": read_text(os.path.join(d, "started"), 32),
        "stop_requested": read_text(os.path.join(d, "stop_requested"), 32),
        "log_time": mtime(os.path.join(d, "output.log")),
    }
    run["steps"], run["end"] = last_records(os.path.join(d, "metrics.jsonl"))
    attempts = os.path.join(d, "attempts.json")  # written by the run's supervisor (runs.supervise)
    if os.path.exists(attempts):
        try:
            with open(attempts, "rb") as f:
                run["attempts"] = json.loads(f.read())
        except (OSError, ValueError):
            pass
    if exit_text not in (None, "0"):
        run["error"] = error_line(os.path.join(d, "output.log"))
    if summary:
        run["summary"] = metrics_summary(os.path.join(d, "metrics.jsonl"))
    job = read_text(os.path.join(d, "slurm_job"), 32)
    if job:
        run["slurm"] = {"job_id": job}  # its state: list_runs asks SLURM once for all its runs
    return run


def list_runs(req: dict) -> dict:
    """Every run directory's files and the tmux sessions, in one answer; the laptop derives states."""
    sessions = tmux("list-sessions", "-F", LIST_FORMAT)
    out: dict = {"now": time.time(), "sessions": sessions.stdout.decode(errors="replace"), "runs": []}
    base = runs_dir(req["remote_dir"])
    try:
        names = sorted(n for n in os.listdir(base) if NAME_RE.match(n))
    except OSError:
        return out
    for name in names[-int(req.get("limit", 50)) :]:
        run = run_facts(os.path.join(base, name), bool(req.get("summary")))
        if run is not None:
            out["runs"].append(run)
    jobs = [r["slurm"]["job_id"] for r in out["runs"] if "slurm" in r and r["exit_code"] is None]
    if jobs and which("squeue"):
        states = slurm_states(jobs)
        for r in out["runs"]:
            if "slurm" in r:
                r["slurm"].update(states.get(r["slurm"]["job_id"], {}))
    return out


def header_max_steps(header: dict) -> int | None:
    """The run's planned steps (config.train.max_steps of its metrics header), if it says."""
    node: object = header
    for key in ("config", "config", "train", "max_steps"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def metrics_summary(path: str) -> dict | None:
    """What `pippa runs` shows of a whole metrics.jsonl: last step, final and best reward, the last
    eval line's metrics, the W&B run, how it ended. A resumed header forgets the points its resume
    redoes (docs/CONTRACTS.md), as the dashboard's reader does. None without a metrics file."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, read line by line
    except OSError:
        return None
    rewards: list = []  # (step, reward/mean)
    evals: list = []  # eval records
    out: dict = {"recipe": None, "wandb": None, "last_step": None, "end": None}
    with f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # a partial last line: not written yet
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            kind, step = rec.get("type"), rec.get("step")
            if kind == "header":
                resumed = rec.get("resumed_from_step")
                keep = resumed if isinstance(resumed, int) else -1
                rewards = [p for p in rewards if p[0] <= keep]
                evals = [e for e in evals if e["step"] <= keep]
                out["end"] = None
                last = out["last_step"]
                out["last_step"] = min(last, keep) if last is not None and keep >= 0 else None
                out["recipe"] = rec.get("recipe", out["recipe"])
                out["wandb"] = rec.get("wandb") or out["wandb"]
                out["max_steps"] = header_max_steps(rec)
            elif kind == "step" and isinstance(step, int):
                out["last_step"] = step
                value = rec.get("reward/mean")
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    rewards.append((step, float(value)))
            elif kind == "eval" and isinstance(step, int):
                evals.append(rec)
            elif kind == "end":
                out["end"] = {k: rec.get(k) for k in ("status", "step", "error")}
    out["final_reward"] = rewards[-1][1] if rewards else None
    best = max(rewards, key=lambda p: p[1]) if rewards else None
    out["best_reward"], out["best_step"] = (best[1], best[0]) if best else (None, None)
    last_eval = evals[-1] if evals else None
    out["eval"] = (
        {k: v for k, v in last_eval.items() if k not in ("type", "time")} if last_eval is not None else None
    )
    return out


def write_sync_marker(remote_dir: str, marker: dict) -> None:
    pippa = os.path.join(host_path(remote_dir), ".pippa")
    os.makedirs(pippa, exist_ok=True)
    write_atomic(os.path.join(pippa, "sync.json"), (json.dumps(marker) + "\n").encode())


def launch(req: dict) -> dict:
    """Refuse or replace the session, write each run's run.json and cmd.sh, start the session."""
    if req.get("sync_marker") is not None:
        write_sync_marker(req["remote_dir"], req["sync_marker"])
    if which("tmux") is None:
        raise AgentError("tool_missing", "tmux is not installed")
    session = req["session"]
    if not SESSION_RE.match(session):
        raise AgentError("usage", f"invalid session name {session!r}")
    base = runs_dir(req["remote_dir"])
    old = None
    if tmux("has-session", "-t", "=" + session).returncode == 0:
        if not req.get("replace"):
            raise AgentError("session_exists", f"session {session} exists")
        mark_replaced(base, session, int(req["stamp"]))
        # Renamed aside and killed only once the new one exists: killing it first could end the
        # server, and a new server numbers sessions from $0 again (a reused identity).
        old = f"{session}-replaced-{int(req['stamp'])}"
        tmux("rename-session", "-t", "=" + session, old)
    for r in req["runs"]:
        if not NAME_RE.match(r["run_id"]):
            raise AgentError("usage", f"invalid run id {r['run_id']!r}")
        d = os.path.join(base, r["run_id"])
        if r.get("resume"):
            reopen_run_dir(d, session, float(req["stamp"]))
        else:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "run.json"), "w") as f:
                f.write(r["run_json"] + "\n")
        with open(os.path.join(d, "cmd.sh"), "w") as f:
            f.write(r["cmd_sh"])
        if r.get("supervisor") is not None:  # a run with a restart policy: its host supervisor
            write_atomic(os.path.join(d, "supervise.py"), r["supervisor"].encode())
    p = tmux(*req["tmux_argv"][1:])
    if p.returncode != 0 and b"server exited unexpectedly" in p.stderr:
        # the tmux server was exiting as we connected (its last session had just ended): a new one
        # starts on the next try
        time.sleep(0.2)
        p = tmux(*req["tmux_argv"][1:])
    if old is not None:  # a failed start still ends the replaced session, as asked
        tmux("kill-session", "-t", "=" + old)
    if p.returncode != 0:
        raise AgentError("tmux", "tmux new-session failed: " + p.stderr.decode(errors="replace").strip())
    ident = text(p)
    for r in req["runs"]:
        with open(os.path.join(base, r["run_id"], "tmux_session"), "w") as f:
            f.write(ident + "\n")
    return {"identity": ident}


# What says a run has started or ended; a resumed run starts without them (its log, metrics and
# checkpoints stay).
RUN_STATE_FILES = ("exit_code", "exit_code.tmp", "started", "stop_requested", "tmux_session")


def reopen_run_dir(d: str, session: str, stamp: float) -> None:
    """Keep the run directory of a run that resumes: clear its state files, and record in run.json
    the session it now runs in and when it resumed (its command and recipe stay as launched)."""
    try:
        with open(os.path.join(d, "run.json"), "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        raise AgentError("not_found", f"no run to resume at {d}") from None
    for name in RUN_STATE_FILES:
        if os.path.lexists(os.path.join(d, name)):
            os.unlink(os.path.join(d, name))
    meta["session"] = session
    meta["resumed"] = [*meta.get("resumed", []), stamp]
    write_atomic(os.path.join(d, "run.json"), (json.dumps(meta) + "\n").encode())


def mark_replaced(base: str, session: str, stamp: int) -> None:
    """Record ``stop_requested`` on the unfinished runs of ``session`` before it is replaced."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        d = os.path.join(base, name)
        if os.path.exists(os.path.join(d, "exit_code")):
            continue
        try:
            with open(os.path.join(d, "run.json"), "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("session") == session:
            with open(os.path.join(d, "stop_requested"), "w") as f:
                f.write(f"{stamp}\n")


def stop(req: dict) -> dict:
    """Mark the runs stop_requested, Ctrl-C the session, wait for the exit code up to the grace
    period, then kill the session (ends a sweep's remaining runs; kills a job that ignored Ctrl-C)."""
    base = runs_dir(req["remote_dir"])
    session = req["session"]
    if not SESSION_RE.match(session):
        raise AgentError("usage", f"invalid session name {session!r}")
    for rid in req["run_ids"]:
        if NAME_RE.match(rid):
            with open(os.path.join(base, rid, "stop_requested"), "w") as f:
                f.write(f"{int(req['stamp'])}\n")
    tmux("send-keys", "-t", f"={session}:", "C-c")
    watch = os.path.join(base, req["watch"], "exit_code")
    deadline = time.monotonic() + float(req["grace_s"])
    while time.monotonic() < deadline:
        if os.path.exists(watch) or tmux("has-session", "-t", "=" + session).returncode != 0:
            break
        time.sleep(0.25)
    killed = tmux("kill-session", "-t", "=" + session).returncode == 0
    return {"killed_session": killed}


# -- SLURM ----------------------------------------------------------------------------------------
# A run on a SLURM cluster is a batch job instead of a tmux session: its run directory holds the
# sbatch script (job.sbatch) and the job id (slurm_job); squeue / scontrol (sacct with accounting)
# say its state. The script itself records started / exit_code like cmd.sh does.
SLURM_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
_JOB_ID_RE = re.compile(r"^[0-9]+(_[0-9]+)?$")


def slurm_submit(req: dict) -> dict:
    """Write run.json and job.sbatch into the run directory, ``sbatch`` it, record the job id."""
    if req.get("sync_marker") is not None:
        write_sync_marker(req["remote_dir"], req["sync_marker"])
    if which("sbatch") is None:
        raise AgentError("tool_missing", "sbatch is not installed (is this a SLURM login node?)")
    rid = req["run_id"]
    if not NAME_RE.match(rid):
        raise AgentError("usage", f"invalid run id {rid!r}")
    d = os.path.join(runs_dir(req["remote_dir"]), rid)
    if req.get("resume"):
        reopen_run_dir(d, "slurm", float(req["stamp"]))
        if os.path.lexists(os.path.join(d, "slurm_job")):
            os.unlink(os.path.join(d, "slurm_job"))
    else:
        os.makedirs(d, exist_ok=True)
        write_atomic(os.path.join(d, "run.json"), (req["run_json"] + "\n").encode())
    script = os.path.join(d, "job.sbatch")
    write_atomic(script, req["script"].encode(), 0o755)
    p = run(["sbatch", "--parsable", "--chdir", d, script], timeout=60)
    if p.returncode != 0:
        raise AgentError("slurm", "sbatch failed: " + last_line(p))
    job = text(p).split(";")[0]  # "<id>" or "<id>;<cluster>"
    if not _JOB_ID_RE.match(job):
        raise AgentError("slurm", f"sbatch answered {text(p)!r}, not a job id")
    write_atomic(os.path.join(d, "slurm_job"), (job + "\n").encode())
    return {"job_id": job}


def slurm_states(job_ids: list[str]) -> dict:
    """job id -> {"state", "reason", "nodes", "exit_code"} (exit_code "N:S" once the job ended):
    one squeue for the jobs it still knows, then scontrol (MinJobAge keeps ended jobs a while), then
    sacct where accounting exists; a job none of them knows is "UNKNOWN"."""
    ids = [j for j in job_ids if _JOB_ID_RE.match(j)]
    out: dict = {}
    if not ids:
        return out
    p = run(["squeue", "-h", "-u", str(os.getuid()), "-t", "all", "-o", "%i|%T|%r|%N"], timeout=30)
    for line in text(p).splitlines() if p.returncode == 0 else []:
        parts = line.split("|")
        if len(parts) == 4 and parts[0] in ids:
            out[parts[0]] = {"state": parts[1], "reason": parts[2], "nodes": parts[3], "exit_code": None}
    for job in ids:
        if job in out and out[job]["state"] in SLURM_ACTIVE:
            continue
        fields = scontrol_job(job)
        if fields:
            out[job] = {
                "state": fields.get("JobState", "UNKNOWN"),
                "reason": fields.get("Reason", ""),
                "nodes": fields.get("NodeList", ""),
                "exit_code": fields.get("ExitCode"),
            }
        elif job not in out:
            out[job] = sacct_job(job)
    return out


def scontrol_job(job: str) -> dict:
    p = run(["scontrol", "show", "job", "-o", job], timeout=30)
    if p.returncode != 0:
        return {}
    fields = {}
    for word in text(p).split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def sacct_job(job: str) -> dict:
    p = run(["sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode,NodeList"], timeout=30)
    rows = [r.split("|") for r in text(p).splitlines() if r.strip()] if p.returncode == 0 else []
    if not rows or len(rows[0]) < 3:
        return {"state": "UNKNOWN", "reason": "", "nodes": "", "exit_code": None}
    state = rows[0][0].split()[0]  # "CANCELLED by 0" -> "CANCELLED"
    return {"state": state, "reason": "", "nodes": rows[0][2], "exit_code": rows[0][1]}


def slurm_stop(req: dict) -> dict:
    """Mark the run stop_requested, SIGINT the job's steps (the trainer saves a checkpoint), wait for
    the run's exit code up to the grace period, then cancel the job (a pending job at once)."""
    rid, job = req["run_id"], req["job_id"]
    if not NAME_RE.match(rid) or not _JOB_ID_RE.match(job):
        raise AgentError("usage", f"invalid run {rid!r} or job id {job!r}")
    d = os.path.join(runs_dir(req["remote_dir"]), rid)
    write_atomic(os.path.join(d, "stop_requested"), f"{int(req['stamp'])}\n".encode())
    state = slurm_states([job]).get(job, {}).get("state")
    if state == "RUNNING":
        run(["scancel", "--signal=INT", job], timeout=30)
        deadline = time.monotonic() + float(req["grace_s"])
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(d, "exit_code")):
                break
            if slurm_states([job]).get(job, {}).get("state") not in SLURM_ACTIVE:
                break
            time.sleep(0.5)
    cancelled = False
    if slurm_states([job]).get(job, {}).get("state") in SLURM_ACTIVE:
        cancelled = run(["scancel", job], timeout=30).returncode == 0
    return {"was": state, "cancelled": cancelled}


# -- streams --------------------------------------------------------------------------------------
def write_out(data: bytes) -> None:
    out = sys.stdout.buffer
    out.write(data)
    out.flush()


def read(req: dict) -> None:
    """The file's bytes after ``offset`` (nothing when it does not exist)."""
    try:
        with open(host_path(req["path"]), "rb") as f:
            f.seek(int(req.get("offset", 0)))
            while True:
                data = f.read(1 << 16)
                if not data:
                    return
                write_out(data)
    except FileNotFoundError:
        return


def _exit_on_stdin_eof() -> None:
    """The client closed the channel (or the connection went): stop at once."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os._exit(0)


def follow(req: dict, poll_s: float = 0.1) -> None:
    """Stream the file from ``offset`` as it grows (waiting for it to appear) until the run is over:
    ``end_file`` exists or ``session`` is gone; then one last read, so nothing written before the
    end is missed. Without an end condition it streams until the client goes away."""
    if req.get("watch_stdin", True):
        import threading

        threading.Thread(target=_exit_on_stdin_eof, daemon=True).start()
    path = host_path(req["path"])
    offset = int(req.get("offset", 0))
    end_file = host_path(req["end_file"]) if req.get("end_file") else None
    session = req.get("session")
    check_every = max(1, int(float(req.get("check_s", 0.5)) / poll_s))
    f = None
    ticks = 0
    ending = False
    try:
        while True:
            if f is None:
                try:
                    f = open(path, "rb")  # noqa: SIM115 - held open across polls
                    f.seek(offset)
                except FileNotFoundError:
                    f = None
            if f is not None:
                while True:
                    data = f.read(1 << 16)
                    if not data:
                        break
                    write_out(data)
            if ending:
                return
            ticks += 1
            if ticks % check_every == 0 and _run_over(end_file, session):
                ending = True  # one more read picks up what was written just before the end
                continue
            time.sleep(poll_s)
    finally:
        if f is not None:
            f.close()


def _run_over(end_file: str | None, session: str | None) -> bool:
    if end_file is not None and os.path.exists(end_file):
        return True
    return session is not None and tmux("has-session", "-t", "=" + session).returncode != 0


# -- pull -----------------------------------------------------------------------------------------
PULL_TAIL = 4096  # bytes before a laptop copy's end that must match for an append-only pull
PULL_CHUNK = 1 << 20
CHECKPOINT_RE = re.compile(r"^checkpoint-([0-9]+)$")


def tail_digest(path: str, size: int) -> str | None:
    """sha256 of the ``PULL_TAIL`` bytes before ``size``: the laptop's copy is a prefix of the host's
    file when these match (logs and metrics only grow; a resume replaces metrics.jsonl)."""
    import hashlib

    try:
        with open(path, "rb") as f:
            f.seek(max(0, size - PULL_TAIL))
            data = f.read(min(size, PULL_TAIL))
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if len(data) == min(size, PULL_TAIL) else None


def run_files(run_dir: str, checkpoint: str | None) -> tuple[list, list, str | None]:
    """A run's regular files (symlinks never followed) as ``[rel, size, mtime]``; of ``checkpoints/``
    only the chosen one (``latest``, or a ``checkpoint-N``/``N`` name). Also every checkpoint's name."""
    ckdir = os.path.join(run_dir, "checkpoints")
    try:
        names = [n for n in os.listdir(ckdir) if CHECKPOINT_RE.match(n)]
        names = [n for n in names if os.path.isdir(os.path.join(ckdir, n))]
    except OSError:
        names = []
    names.sort(key=lambda n: int(n.split("-")[1]))
    chosen = None
    if checkpoint == "latest":
        chosen = names[-1] if names else None
    elif checkpoint:
        want = checkpoint if checkpoint.startswith("checkpoint-") else "checkpoint-" + checkpoint
        if want not in names:
            known = ", ".join(names) or "none"
            raise AgentError("not_found", f"no {want} in {run_dir} (checkpoints: {known})")
        chosen = want
    files: list = []

    def walk(rel: str) -> None:
        try:
            it = os.scandir(os.path.join(run_dir, rel) if rel else run_dir)
        except OSError:
            return
        with it:
            for e in sorted(it, key=lambda e: e.name):
                name = rel + "/" + e.name if rel else e.name
                if e.is_symlink():
                    continue
                if e.is_dir():
                    if name == "checkpoints":
                        if chosen:
                            walk("checkpoints/" + chosen)
                    else:
                        walk(name)
                elif e.is_file() and not e.name.endswith(".tmp"):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    files.append([name, st.st_size, st.st_mtime])

    walk("")
    return files, names, chosen


def write_frame(data: bytes) -> None:
    out = sys.stdout.buffer
    out.write(b"%d\n" % len(data))
    out.write(data)
    out.flush()


def pull(req: dict) -> None:
    """What the laptop lacks of a run directory, in one stream: a JSON manifest line
    (``files``: ``[rel, size, offset, mtime]``, ``checkpoints``, ``chosen``, ``send``), then for each
    file with ``offset < size`` its bytes from ``offset`` as frames (``<n>\\n`` + n bytes) ending in
    ``0\\n``. A file the laptop has (``have``: rel -> [size, tail_digest]) is sent from its end when
    the host's copy still starts with it, else whole. Sizes are those of the listing: a file that
    grows meanwhile is sent up to that size (the next pull gets the rest)."""
    run_dir = host_path(req["run_dir"])
    try:
        if not os.path.isfile(os.path.join(run_dir, "run.json")):
            raise AgentError("not_found", f"no run at {run_dir}")
        files, names, chosen = run_files(run_dir, req.get("checkpoint"))
    except AgentError as e:  # answered like a JSON verb's failure, in place of the manifest
        write_out((json.dumps({"error": e.kind, "message": str(e)}) + "\n").encode())
        return
    have = req.get("have") or {}
    plan = []
    for rel, size, mt in files:
        offset = 0
        local = have.get(rel)
        if isinstance(local, list) and len(local) == 2 and isinstance(local[0], int) and local[0] <= size:
            offset = local[0] if tail_digest(os.path.join(run_dir, rel), local[0]) == local[1] else 0
        plan.append([rel, size, offset, mt])
    send = sum(size - offset for _, size, offset, _ in plan)
    manifest = {"files": plan, "checkpoints": names, "chosen": chosen, "send": send}
    write_out((json.dumps(manifest) + "\n").encode())
    for rel, size, offset, _ in plan:
        if offset >= size:
            continue
        try:
            with open(os.path.join(run_dir, rel), "rb") as f:
                f.seek(offset)
                left = size - offset
                while left > 0:
                    data = f.read(min(PULL_CHUNK, left))
                    if not data:
                        break  # it shrank (replaced) meanwhile: the laptop sees a short file
                    write_frame(data)
                    left -= len(data)
        except OSError:
            pass
        write_frame(b"")


def secrets_env(path: str) -> dict:
    """``KEY='value'`` lines of the host's secrets file (written by `pippa up`), as a dict."""
    import shlex

    try:
        with open(host_path(path)) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            try:
                words = shlex.split(value)
            except ValueError:
                continue
            out[key] = words[0] if words else ""
    return out


def wandb_sync(req: dict) -> dict:
    """Upload a run's offline W&B runs with ``wandb sync``, the API key from the secrets file (never
    argv). The host's python runs it (``python`` argv), in ``remote_dir`` (``uv run`` finds its project)."""
    run_dir = host_path(req["run_dir"])
    base = os.path.join(run_dir, "wandb")
    try:
        found = sorted(n for n in os.listdir(base) if n.startswith("offline-run-"))
    except OSError:
        found = []
    if not found:
        raise AgentError("not_found", f"no offline W&B run in {run_dir} (the run had W&B online or off)")
    env = {**secrets_env(req["secrets_path"]), **(req.get("env") or {})}
    env.pop("PIPPA_NOTIFY", None)  # only the alerts delivery reads the target (docs/CONTRACTS.md)
    if not (env.get("WANDB_API_KEY") or os.environ.get("WANDB_API_KEY")):
        raise AgentError("usage", "no WANDB_API_KEY on the host: put it in .env, then `pippa up` pushes it")
    python = list(req["python"])
    if python[0].startswith("~"):
        python[0] = host_path(python[0])
    argv = [*python, "-m", "wandb", "sync", *(os.path.join(base, n) for n in found)]
    import subprocess

    timeout = float(req.get("timeout", 600))
    try:
        p = subprocess.run(
            argv, cwd=host_path(req["remote_dir"]), stdin=subprocess.DEVNULL, capture_output=True,
            timeout=timeout, env={**os.environ, "PATH": search_path(), **env},
        )  # fmt: skip
    except FileNotFoundError:
        why = f"{python[0]} not found on the host (pippa up installs it)"
        raise AgentError("tool_missing", why) from None
    except subprocess.TimeoutExpired as e:
        said = last_line(subprocess.CompletedProcess(argv, 124, e.stdout or b"", e.stderr or b""))
        why = f"wandb sync did not finish within {timeout:g}s ({said})"
        return {"synced": found, "status": 124, "why": why}
    return {"synced": found, "status": p.returncode, "why": "" if p.returncode == 0 else last_line(p)}


# -- sync -----------------------------------------------------------------------------------------
def sync_list(req: dict) -> dict:
    """Size and whole-second mtime of every file and symlink under remote_dir (protected tops left
    out, symlinks never followed), and whether the host can unpack zstd."""
    root = host_path(req["remote_dir"])
    files: list[list] = []

    def walk(rel: str) -> None:
        try:
            it = os.scandir(os.path.join(root, rel) if rel else root)
        except OSError:
            return
        with it:
            for e in it:
                name = rel + "/" + e.name if rel else e.name
                if not rel and e.name in PROTECTED_TOP:
                    continue
                try:
                    if e.is_symlink() or e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        files.append([os.fsdecode(name), st.st_size, int(st.st_mtime)])
                    elif e.is_dir(follow_symlinks=False):
                        walk(name)
                except OSError:
                    continue

    walk("")
    return {"zstd": which("zstd") is not None, "files": files}


def safe_rel(name: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise AgentError("usage", f"unsafe path in a sync: {name!r}")
    if parts[0] in PROTECTED_TOP:
        raise AgentError("usage", f"sync never writes {parts[0]}/ on the host")
    return name


class Placer:
    """Moves staged files into remote_dir without ever following a host-side symlink: a directory
    on the way that is a symlink (or a file) is replaced by a real directory first, so a file can
    only land inside remote_dir."""

    def __init__(self, root: str, stage: str) -> None:
        self.root = root
        self.stage = stage
        self.ready: set[str] = set()  # relative directories checked (or made) real

    def real_dir(self, rel: str) -> None:
        if not rel or rel in self.ready:
            return
        self.real_dir(os.path.dirname(rel))
        path = os.path.join(self.root, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
        else:
            if not stat.S_ISDIR(st.st_mode):  # a symlink (to a dir or not) or a file: replace it
                os.unlink(path)
                os.mkdir(path)
        self.ready.add(rel)

    def place(self, rel: str) -> None:
        self.real_dir(os.path.dirname(rel))
        dst = os.path.join(self.root, rel)
        if os.path.isdir(dst) and not os.path.islink(dst):
            import shutil

            shutil.rmtree(dst)  # the repo now has a file where the host had a directory
        os.rename(os.path.join(self.stage, rel), dst)  # replaces a symlink itself, never its target

    def place_top(self, top: str) -> bool:
        """A top-level directory absent on the host moves in whole (a cold sync: one rename)."""
        path = os.path.join(self.root, top)
        if os.path.lexists(path):
            return False
        os.rename(os.path.join(self.stage, top), path)
        self.ready.add(top)
        return True

    def delete(self, rel: str) -> None:
        parent = os.path.dirname(rel)
        while parent:  # never delete through a symlinked directory
            if os.path.islink(os.path.join(self.root, parent)):
                return
            parent = os.path.dirname(parent)
        path = os.path.join(self.root, rel)
        if os.path.lexists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
            os.unlink(path)
            parent = os.path.dirname(rel)
            while parent:  # directories the deletion emptied go too, as with rsync --delete
                try:
                    os.rmdir(os.path.join(self.root, parent))
                except OSError:  # not empty (or gone): the ones above are not empty either
                    break
                parent = os.path.dirname(parent)


def sync_apply(req: dict) -> dict:
    """Unpack the compressed tar that follows the request on stdin into a private stage, then move
    each file into place (rename: atomic, so every file is old or new), delete, write the marker.
    The stage is removed whatever happens."""
    import shutil
    import subprocess
    import tempfile

    root = host_path(req["remote_dir"])
    send = [safe_rel(n) for n in req["send"]]
    delete = [safe_rel(n) for n in req["delete"]]
    pippa = os.path.join(root, ".pippa")
    os.makedirs(pippa, exist_ok=True)
    _remove_stale_stages(pippa)
    stage = tempfile.mkdtemp(prefix="stage-", dir=pippa)
    try:
        files = os.path.join(stage, "files")
        os.mkdir(files)
        unpack = ["zstd", "-dcq"] if req.get("zstd") else ["gzip", "-dc"]
        dec = subprocess.Popen(unpack, stdin=0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tar = subprocess.Popen(
            ["tar", "-xpf", "-", "--no-same-owner", "-C", files],
            stdin=dec.stdout, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert dec.stdout is not None
        dec.stdout.close()
        tar_err = tar.communicate()[1]
        dec_err = dec.communicate()[1]
        if dec.returncode != 0 or tar.returncode != 0:
            why = (dec_err + tar_err).decode(errors="replace").strip()
            raise AgentError("sync", "unpacking the sync stream failed: " + (why or "truncated stream"))
        placer = Placer(root, files)
        whole = set()
        for top in sorted({n.split("/", 1)[0] for n in send if "/" in n}):
            if placer.place_top(top):
                whole.add(top)
        for name in send:
            if name.split("/", 1)[0] not in whole or "/" not in name:
                placer.place(name)
        for name in delete:
            placer.delete(name)
        write_sync_marker(root, req["marker"])
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"sent": len(send), "deleted": len(delete)}


def _remove_stale_stages(pippa: str) -> None:
    import shutil

    now = time.time()
    for name in os.listdir(pippa):
        path = os.path.join(pippa, name)
        if name.startswith("stage-") and now - (mtime(path) or now) > STAGE_MAX_AGE_S:
            shutil.rmtree(path, ignore_errors=True)


def sync_marker(req: dict) -> dict:
    write_sync_marker(req["remote_dir"], req["marker"])
    return {}


def write_file(req: dict) -> dict:
    """Write ``text`` to ``path`` atomically (e.g. .pippa/setup.json), creating its directory."""
    path = host_path(req["path"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, req["text"].encode(), int(req.get("mode", 0o644)))
    return {}


# -- first-hour checks and tidying (issue 26) -----------------------------------------------------
def check_python(req: dict) -> dict:
    """Does the training python exist, run, and (``module``) import the training code from
    ``remote_dir``? Answers ``{"ok", "python", "missing", "line"}``: ``line`` is its last error line."""
    argv = [str(w) for w in req["argv"]]
    exe = argv[0]
    path = host_path(exe) if exe.startswith(("~", "/")) else which(exe)
    if path is None or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return {"ok": False, "python": exe, "missing": True, "line": None}
    code = "import sys; sys.path.insert(0, sys.argv[1])"
    module = req.get("module")
    if module:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$", str(module)):
            raise AgentError("usage", "invalid module name " + repr(module))
        code += "; import " + str(module)
    p = run([path, *argv[1:], "-c", code, host_path(req["remote_dir"])], timeout=120)
    lines = [ln.strip() for ln in p.stderr.decode(errors="replace").splitlines() if ln.strip()]
    last = lines[-1][:300] if lines else None
    return {"ok": p.returncode == 0, "python": exe, "missing": False, "line": last}


def run_checkpoints(req: dict) -> dict:
    """The checkpoint directories of a run (``checkpoint-N``), oldest first."""
    d = os.path.join(runs_dir(req["remote_dir"]), req["run_id"])
    if not NAME_RE.match(req["run_id"]) or os.path.islink(d):
        raise AgentError("usage", "invalid run id " + repr(req["run_id"]))
    try:
        names = os.listdir(os.path.join(d, "checkpoints"))
    except OSError:
        names = []
    found = [n for n in names if re.match(r"^checkpoint-[0-9]+$", n)]
    return {"checkpoints": sorted(found, key=lambda n: int(n.split("-")[1]))}


def dir_size(path: str) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def remove_runs(req: dict) -> dict:
    """Delete run directories (``dry_run``: only measure them). The laptop picks ended runs; a run
    without an exit code whose tmux session is alive is refused here too."""
    import shutil

    base = runs_dir(req["remote_dir"])
    alive = set(text(tmux("list-sessions", "-F", "#{session_name}")).splitlines())
    out: dict = {"removed": [], "refused": {}, "bytes": 0}
    for run_id in req["run_ids"]:
        d = os.path.join(base, str(run_id))
        if not NAME_RE.match(str(run_id)) or os.path.islink(d) or not os.path.isdir(d):
            out["refused"][run_id] = "no such run directory"
            continue
        facts = run_facts(d) or {}
        session = str((facts.get("meta") or {}).get("session", ""))
        if facts.get("exit_code") is None and session in alive:
            out["refused"][run_id] = "its session " + session + " is alive"
            continue
        out["bytes"] += dir_size(d)
        if not req.get("dry_run"):
            shutil.rmtree(d)
        out["removed"].append(run_id)
    return out


JSON_VERBS = {
    "probe": probe,
    "install_bwrap": install_bwrap,
    "install_uv": install_uv,
    "list_runs": list_runs,
    "launch": launch,
    "stop": stop,
    "sync_list": sync_list,
    "sync_apply": sync_apply,
    "sync_marker": sync_marker,
    "write_file": write_file,
    "wandb_sync": wandb_sync,
    "slurm_submit": slurm_submit,
    "slurm_stop": slurm_stop,
    "check_python": check_python,
    "run_checkpoints": run_checkpoints,
    "remove_runs": remove_runs,
}
STREAM_VERBS = {"read": read, "follow": follow, "pull": pull}


# -- framing --------------------------------------------------------------------------------------
def read_exact(n: int) -> bytes:
    """Exactly ``n`` bytes from fd 0, unbuffered: what follows stays on fd 0 for the verb."""
    buf = b""
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            raise SystemExit("pippa agent: the request was cut short")
        buf += chunk
    return buf


def read_frame() -> bytes | None:
    """``<n>\\n`` then n bytes (the header read one byte at a time: no read-ahead); None when stdin
    ends before a frame begins (the client has no more requests)."""
    head = b""
    while not head.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            if head:
                raise SystemExit("pippa agent: the request was cut short")
            return None
        head += c
    return read_exact(int(head))


def answer(verb: str, req: dict) -> None:
    """Run one JSON verb and print its answer (or its expected failure) as one line."""
    if verb not in JSON_VERBS:
        raise SystemExit(f"pippa agent: unknown verb {verb!r}")
    try:
        result = JSON_VERBS[verb](req)
    except AgentError as e:
        result = {"error": e.kind, "message": str(e)}
    write_out((json.dumps(result) + "\n").encode())


def serve(first: bytes | None) -> None:
    """Answer ``first`` and then each request that follows on stdin, until stdin ends; a stream verb
    owns the rest of stdin and stdout, so it is the last request of its process."""
    request = first
    while request is not None:
        message = json.loads(request)
        verb, args = message["verb"], message.get("args", {})
        if verb in STREAM_VERBS:
            STREAM_VERBS[verb](args)
            return
        answer(verb, args)
        request = read_frame()


def main() -> None:
    """``python3 agent.py < requests``: the same service without the bootstrap (for debugging)."""
    serve(read_frame())


if __name__ == "__main__":
    main()
