"""Probe and install: what `pippa up` reports of a host (tools, GPUs, python, free disk, the code
sandbox), installing uv and bubblewrap, and whether the training python runs."""

from __future__ import annotations

import contextlib
import os
import re
import sys

from pippa_agent.host import AgentError, ErrorKind, host_path, last_line, run, text, tmux, which
from pippa_contract import cgroupdeleg

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import (
        CheckPythonAnswer,
        CheckPythonRequest,
        Empty,
        InstallBwrapAnswer,
        InstallUvAnswer,
        ProbeAnswer,
        ProbeRequest,
        SandboxFacts,
    )


def probe(req: ProbeRequest) -> ProbeAnswer:
    """Facts `pippa up` reports: tools, GPUs, python, free disk, and whether the code sandbox runs."""
    t = tmux("-V")
    uv = run(["uv", "--version"], timeout=30)
    gpu_lines: list[str] = []
    driver = cuda = None
    if which("nvidia-smi"):
        gpus = run(["nvidia-smi", "-L"])
        gpu_lines = [g for g in text(gpus).splitlines() if g.strip()] if gpus.returncode == 0 else []
        drv = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        driver = next(iter(text(drv).splitlines()), None) if drv.returncode == 0 else None
        m = re.search(r"CUDA Version: *([0-9.]+)", text(run(["nvidia-smi"])))
        cuda = m.group(1) if m else None
    d = host_path(req.get("remote_dir") or "~")
    while not os.path.isdir(d):
        d = os.path.dirname(d)
    st = os.statvfs(d)
    return {
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "python_path": sys.executable,
        "tmux": text(t) if t.returncode == 0 else None,
        "uv": text(uv) if uv.returncode == 0 else None,
        "curl": which("curl") is not None,
        "gpus": gpu_lines,
        "driver": driver,
        "cuda": cuda,
        "free_disk_gb": round(st.f_bavail * st.f_frsize / 1024**3, 1),
        "sandbox": sandbox_facts(),
    }


def sandbox_facts() -> SandboxFacts:
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
    cgroups, cgroups_why = cgroup_facts()
    # the strongest sandbox.isolation a code recipe can ask for here (training_core.sandbox.isolation)
    level = "unsafe"
    if works and seccomp:
        level = "strict" if cgroups else "rlimits"
    return {
        "bwrap": bwrap,
        "works": works,
        "why": why,
        "root": root,
        "sudo": sudo,
        "userns": userns,
        "apt": which("apt-get") is not None,
        "seccomp": seccomp,
        "cgroups": cgroups,
        "cgroups_why": cgroups_why,
        "level": level,
    }


def cgroup_caps(root: str = "/sys/fs/cgroup") -> bool:
    """Whether a run's processes can be capped together here (``cgroup_facts``'s first half)."""
    return cgroup_facts(root)[0]


def cgroup_facts(root: str = "/sys/fs/cgroup") -> tuple[bool, str]:
    """Whether a trainer started as this user could cap a run's processes together, and why, found
    as the trainer finds it (``pippa_contract.cgroupdeleg.plan``, used by
    training_core.sandbox.cgroups.CgroupSlots.create): root's cgroups, or a subtree delegated to this
    user; the memory and pids controllers are tried by making a cgroup and removing it again (a
    writable directory is not enough). A delegated v2 cgroup is only read: the trainer moves itself
    into a leaf of it, which the probe must not do to the agent."""
    own = None
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        own = cgroupdeleg.own_paths(f.read())
    where = cgroupdeleg.plan(root, own) if own is not None else "no /proc/self/cgroup"
    if own is not None and root == cgroupdeleg.ROOT and cgroupdeleg.wants_scope(where, os.geteuid()):
        why = cgroupdeleg.user_scope()  # what training_core.launch decides with for a strict code run
        if not why:
            return True, (
                "cgroup v2 caps per run (pippa run starts the trainer in a delegated systemd user scope)"
            )
        return False, f"{where}; {why}"
    if isinstance(where, str):
        return False, where
    if where.move_self_to is not None:
        return True, where.describe()
    name = f"pippa-probe-{os.getpid()}"
    made = []
    try:
        if where.kind == "cgroup v1":
            for parent, control in (
                (where.memory_parent, "memory.limit_in_bytes"),
                (where.pids_parent, "pids.max"),
            ):
                d = os.path.join(parent, name)
                os.mkdir(d)
                made.append(d)
                if not os.path.exists(os.path.join(d, control)):  # the kernel makes it in a real cgroup
                    return False, f"{parent} is not a {where.kind} memory/pids cgroup"
            return True, where.describe()
        d = os.path.join(where.memory_parent, name)
        os.mkdir(d)
        made.append(d)
        with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
            f.write("+memory +pids")
        slot = os.path.join(d, "0")  # a run's slot: the kernel gives it the controllers' files
        os.mkdir(slot)
        made.append(slot)
        if all(os.path.exists(os.path.join(slot, c)) for c in ("memory.max", "pids.max")):
            return True, where.describe()
        return False, f"{where.memory_parent} gives no memory and pids controllers"
    except OSError as e:
        return False, f"{where.describe()}: {e.strerror or e}"
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(d)


def install_bwrap(req: Empty) -> InstallBwrapAnswer:
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


def uv_version() -> str | None:
    p = run(["uv", "--version"], timeout=30)
    return text(p) if p.returncode == 0 else None


def install_uv(req: Empty) -> InstallUvAnswer:
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


def check_python(req: CheckPythonRequest) -> CheckPythonAnswer:
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
            raise AgentError(ErrorKind.USAGE, "invalid module name " + repr(module))
        code += "; import " + str(module)
    p = run([path, *argv[1:], "-c", code, host_path(req["remote_dir"])], timeout=120)
    lines = [ln.strip() for ln in p.stderr.decode(errors="replace").splitlines() if ln.strip()]
    last = lines[-1][:300] if lines else None
    return {"ok": p.returncode == 0, "python": exe, "missing": False, "line": last}
