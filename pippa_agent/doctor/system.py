"""The host around the GPUs: the environment runs inherit, free disk, /dev/shm, the open-files limit,
the training python's torch (does it match the driver, does it see the GPUs) and, where installed,
DCGM's own short diagnostic."""

from __future__ import annotations

import json
import os
import re

from pippa_agent.doctor.disk_floor import checkpoint_floor
from pippa_agent.doctor.proc import bounded as run
from pippa_agent.host import host_path, which, write_atomic
from pippa_contract import rundir as rd
from pippa_contract.diskspace import size_text
from pippa_contract.doctor import FAIL, OK, SKIPPED, WARN, check

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_contract.messages import Check

SHM_DIR = "/dev/shm"
SHM_FAIL_MIB = 512  # NCCL's shared-memory transport and DataLoader workers need more than Docker's 64 MB
SHM_WARN_MIB = 2048
DISK_WARN_PCT, DISK_FAIL_PCT = 90.0, 95.0
DISK_FAIL_FREE_GIB = 5.0  # less than a checkpoint of a 1.5B model with its optimizer state
NOFILE_WARN = 1024
TORCH_TIMEOUT_S = 90.0
DCGM_TIMEOUT_S = 120.0
# Run by the training python: torch's version and the CUDA it was built for, read from torch/version.py
# without importing torch (fast); with "import" also torch's own view of the GPUs.
TORCH_PROBE = r"""
import importlib.util, json, os, re, sys
out = {"torch": None, "cuda": None, "available": None, "count": None, "error": None}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        src = open(path).read()
        v = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", src, re.M)
        c = re.search(r"^cuda\s*(?::[^=]*)?=\s*(?:['\"]([^'\"]+)['\"]|None)", src, re.M)
        out["torch"] = v.group(1) if v else "?"
        out["cuda"] = c.group(1) if c else None
    except OSError as e:
        out["error"] = str(e)
    if sys.argv[-1] == "import":
        try:
            import torch
            out["available"] = bool(torch.cuda.is_available())
            out["count"] = torch.cuda.device_count() if out["available"] else 0
        except Exception as e:
            out["error"] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:200]
out["files"] = [sys.executable] + ([path] if spec is not None and spec.submodule_search_locations else [])
out["files"] += [d for d in sys.path if d and os.path.isdir(d)]  # a package added or removed: a new mtime
print(json.dumps(out))
"""
TORCH_CACHE = "~/.cache/pippa/doctor-torch.json"  # the version facts, per python and what it imports


def merged_env(extra: dict[str, str]) -> dict[str, str]:
    """What a run on this host sees: the login environment plus the host entry's ``env``."""
    return {**os.environ, **{str(k): str(v) for k, v in extra.items()}}


def env_checks(env: dict[str, str], n_gpus: int) -> list[Check]:
    out = []
    if env.get("NCCL_P2P_DISABLE", "0") not in ("", "0"):
        status = FAIL if n_gpus > 1 else WARN
        out.append(
            check(
                "env",
                status,
                "NCCL_P2P_DISABLE={}: all-reduce goes through host memory, several times "
                "slower; unset it (login files or the host entry's env)".format(env["NCCL_P2P_DISABLE"]),
            )
        )
    if env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        out.append(
            check(
                "env",
                WARN,
                "NCCL_IB_DISABLE={}: no InfiniBand between nodes (fine on one node); "
                "unset it for multi-node runs".format(env["NCCL_IB_DISABLE"]),
            )
        )
    if "CUDA_VISIBLE_DEVICES" in env:
        out.append(
            check(
                "env",
                WARN,
                "CUDA_VISIBLE_DEVICES={!r} is set for every run: it hides GPUs; unset it "
                "(login files or the host entry's env)".format(env["CUDA_VISIBLE_DEVICES"]),
            )
        )
    return out


def _existing(path: str) -> str:
    while not os.path.isdir(path) and path not in ("/", ""):
        path = os.path.dirname(path)
    return path or "/"


def disk_checks(remote_dir: str, env: dict[str, str]) -> list[Check]:
    hf = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    out, seen = [], set()
    for label, path in (("remote dir", host_path(remote_dir)), ("HF cache", hf)):
        where = _existing(path)
        st, dev = os.statvfs(where), os.stat(where).st_dev
        if st.f_blocks == 0 or dev in seen:  # the HF cache on the same disk: one line
            continue
        seen.add(dev)
        free = st.f_bavail * st.f_frsize / 1024**3
        used_pct = 100.0 * (st.f_blocks - st.f_bfree) / st.f_blocks
        what = f"{label} {path}: {used_pct:.0f}% used, {free:.1f} GiB free"
        if used_pct >= DISK_FAIL_PCT or free < DISK_FAIL_FREE_GIB:
            out.append(
                check(
                    "disk",
                    FAIL,
                    f"{what}: checkpoints will fail to save; free space (pippa prune) or use a bigger disk",
                )
            )
        elif (
            label == "remote dir"
            and (floor := checkpoint_floor(rd.runs_dir(host_path(remote_dir))))
            and (st.f_bavail * st.f_frsize < floor[0])
        ):
            need = f"below the {size_text(floor[0])} this host's runs need ({floor[1]})"
            out.append(check("disk", WARN, f"{what}: {need}; free space (pippa prune) before a checkpoint"))
        elif used_pct >= DISK_WARN_PCT:
            out.append(
                check("disk", WARN, f"{what}: nearly full; free space before a long run (pippa prune)")
            )
        else:
            out.append(check("disk", OK, what))
    return out


def shm_check(shm_dir: str = SHM_DIR) -> Check:
    try:
        st = os.statvfs(shm_dir)
    except OSError as e:
        return check("shm", FAIL, f"{shm_dir}: {e.strerror}: NCCL and DataLoader workers need shared memory")
    mib = st.f_blocks * st.f_frsize / 1024**2
    what = f"{shm_dir} is {mib:.0f} MiB"
    if mib < SHM_FAIL_MIB:
        return check(
            "shm",
            FAIL,
            f"{what}: NCCL and DataLoader workers crash with so little; in Docker "
            "run with --shm-size=16g (or --ipc=host)",
        )
    if mib < SHM_WARN_MIB:
        return check("shm", WARN, f"{what}: small for multi-GPU runs; raise it (--shm-size=16g)")
    return check("shm", OK, what)


def nofile_check() -> Check:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    what = f"open files limit {soft} (hard {hard})"
    if 0 <= soft < NOFILE_WARN:
        return check(
            "ulimit",
            WARN,
            f"{what}: DataLoader workers run out of file handles; `ulimit -n 65536` in the login files",
        )
    return check("ulimit", OK, what)


def _stamps(files: list[str]) -> dict[str, list[int]]:
    out = {}
    for f in files:
        try:
            st = os.stat(f)
            out[f] = [st.st_mtime_ns, st.st_size]
        except OSError:
            out[f] = []
    return out


def torch_facts(
    python: list[str], env: dict[str, str], full: bool, cache: str | None = None
) -> dict[str, Any]:
    """The training python's torch (``TORCH_PROBE``); ``{"error": ...}`` when the python does not run.

    Without ``full`` (--quick, `pippa up`) the version facts come from ``cache`` while the python, torch's
    version.py and every directory on the python's sys.path keep their mtime and size (installing or
    removing a package changes its directory's): one python start saved per doctor."""
    exe = python[0]
    path = host_path(exe) if exe.startswith(("~", "/")) else which(exe)
    if path is None or not os.path.isfile(path):
        return {"error": f"the training python {exe} is not there (run pippa up)", "missing": True}
    cache = host_path(cache or TORCH_CACHE)
    key = json.dumps([path, python[1:], env.get("PYTHONPATH"), env.get("PYTHONHOME")])
    if not full:
        try:
            with open(cache) as f:
                hit = json.load(f).get(key)
            if hit and _stamps(list(hit["stamps"])) == hit["stamps"]:
                return dict(hit["facts"])
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            pass
    p = run(
        [path, *python[1:], "-c", TORCH_PROBE, "import" if full else "version"],
        timeout=TORCH_TIMEOUT_S,
        env=env,
    )
    if p.returncode == 124:
        return {"error": f"the training python did not answer in {TORCH_TIMEOUT_S:.0f}s"}
    try:
        facts: dict[str, Any] = json.loads(p.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (p.stderr.decode(errors="replace").strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return {"error": f"the training python failed: {last[:200]}"}
    files = facts.pop("files", None)
    if not full and isinstance(files, list) and not facts.get("error"):
        _remember(cache, key, {"stamps": _stamps([str(f) for f in files]), "facts": facts})
    return facts


def _remember(cache: str, key: str, entry: dict[str, Any]) -> None:
    """Add ``entry`` to the cache file (tmp + rename; a lost race only costs the next doctor a probe)."""
    try:
        with open(cache) as f:
            known = json.load(f)
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    known = dict(list(known.items())[-15:])  # a few pythons per host user at most
    known[key] = entry
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        write_atomic(cache, json.dumps(known).encode(), 0o600)
    except OSError:
        pass


def _major_minor(v: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_checks(facts: dict[str, Any], n_gpus: int, driver_cuda: str | None, full: bool) -> list[Check]:
    if facts.get("missing"):
        return [check("torch", SKIPPED, facts["error"])]
    if facts.get("torch") is None:
        if facts.get("error"):
            return [check("torch", FAIL, facts["error"])]
        return [check("torch", SKIPPED, "the training python has no torch yet (pippa up installs it)")]
    ver, cuda = facts["torch"], facts.get("cuda")
    if n_gpus == 0:
        return [check("torch", OK, f"torch {ver} (no GPU here)")]
    if cuda is None:
        return [
            check(
                "torch",
                FAIL,
                f"torch {ver} is a CPU-only build on a GPU host: training runs on the CPU; "
                "install a CUDA build (the gpu extra: uv sync --extra gpu)",
            )
        ]
    out = []
    need, have = _major_minor(cuda), _major_minor(driver_cuda)
    # CUDA's minor version compatibility: a driver of the same major version runs a newer minor
    # toolkit, except PTX JIT (https://docs.nvidia.com/deploy/cuda-compatibility/); an older major does not
    if need and have and need[0] > have[0]:
        out.append(
            check(
                "driver",
                FAIL,
                f"torch {ver} needs CUDA {cuda} but the driver supports CUDA {driver_cuda} "
                "at most: torch cannot use the GPUs; install a torch built for CUDA "
                f"{driver_cuda} or ask the provider for a newer driver",
            )
        )
    elif need and have and need > have:
        out.append(
            check(
                "driver",
                WARN,
                f"torch {ver} is built for CUDA {cuda}, the driver supports {driver_cuda}: "
                "works through CUDA minor version compatibility, but JIT-compiled kernels may fail",
            )
        )
    else:
        out.append(
            check("driver", OK, f"driver supports CUDA {driver_cuda or '?'}; torch {ver} built for {cuda}")
        )
    if facts.get("error"):
        out.append(check("torch", FAIL, f"import torch failed: {facts['error']}"))
    elif full and facts.get("available") is False:
        out.append(
            check(
                "torch",
                FAIL,
                f"torch {ver} does not see the GPUs (torch.cuda.is_available() is False): "
                "check the driver and CUDA_VISIBLE_DEVICES",
            )
        )
    elif full and facts.get("count") is not None and facts["count"] < n_gpus:
        out.append(
            check(
                "torch",
                FAIL,
                f"torch sees {facts['count']} of {n_gpus} GPUs: check CUDA_VISIBLE_DEVICES and the driver",
            )
        )
    else:
        sees = f", sees {facts['count']} GPU(s)" if full and facts.get("count") is not None else ""
        out.append(check("torch", OK, f"torch {ver}{sees}"))
    return out


def dcgm_check(timeout: float = DCGM_TIMEOUT_S) -> Check | None:
    """``dcgmi diag -r 1`` (DCGM's quick run-level diagnostic) where DCGM is installed; None where not."""
    if which("dcgmi") is None:
        return None
    p = run(["dcgmi", "diag", "-r", "1", "-j"], timeout=timeout)
    out = p.stdout.decode(errors="replace")
    if p.returncode == 124:
        return check("dcgm", FAIL, f"dcgmi diag -r 1 did not finish in {timeout:.0f}s: DCGM or a GPU hangs")
    failed = sorted(
        set(re.findall(r'"test_name"\s*:\s*"([^"]+)"[^{}]*?"status"\s*:\s*"fail', out, re.I | re.S))
    )
    if p.returncode != 0 or failed or re.search(r'"status"\s*:\s*"fail', out, re.I):
        last = (p.stderr.decode(errors="replace") + out).strip().splitlines()
        what = (
            ("failed: " + ", ".join(failed))
            if failed
            else (last[-1][:160] if last else f"exit {p.returncode}")
        )
        return check("dcgm", FAIL, f"dcgmi diag -r 1 {what}: run `dcgmi diag -r 1` for the details")
    return check("dcgm", OK, "dcgmi diag -r 1 passed")
