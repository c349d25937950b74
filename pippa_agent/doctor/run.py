"""The ``doctor`` and ``doctor_history`` verbs: gather the facts (each source bounded by its own
timeout, all at once), turn them into checks, run the active checks unless ``quick``, compare with
the host's history, store the result there and answer it (``pippa_contract.doctor``)."""

from __future__ import annotations

import threading

from pippa_agent.doctor import active, gpu_checks, history, kernel, smi, system
from pippa_contract.doctor import FAIL, OK, SKIPPED, check, result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from pippa_contract.messages import (
        Check,
        DoctorHistoryAnswer,
        DoctorHistoryRequest,
        DoctorRequest,
        DoctorResult,
    )

ACTIVE_SECONDS = 4.0  # per measurement (GEMM, copy): long enough for clocks to settle
HISTORY_LIMIT = 10


def _parallel(jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each job in its own thread (each is a subprocess with its own deadline); their results."""
    out: dict[str, Any] = {}

    def one(name: str, fn: Callable[[], Any]) -> None:
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = e

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def gpu_part(
    xml: Any, expected: Any, named: str | None = None
) -> tuple[list[Check], list[dict[str, Any]], str | None]:
    """``(checks, gpus, driver CUDA)`` from the XML answer (or the reason there is none); ``named``: the
    host's name says it is a GPU box (``h100``), so no driver fails it as ``gpus = N`` would."""
    if isinstance(xml, smi.SmiError):
        return [check("nvidia-smi", FAIL, str(xml))], [], None
    if isinstance(xml, Exception):  # a bug or an OS error reading it: the check says so, the rest goes on
        why = f"reading nvidia-smi -q -x failed: {type(xml).__name__}: {xml}"
        return [check("nvidia-smi", FAIL, why)], [], None
    why, root = xml
    if root is None:
        status = FAIL if expected or named else SKIPPED
        more = (
            f", but the host entry expects {expected} GPUs: install the driver or fix gpus ="
            if expected
            else f", but the host is named like a GPU box ({named}): install the NVIDIA driver, or set "
            "gpus = 0 in its entry if it has none"
            if named
            else ""
        )
        return [check("gpus", status, f"{why}{more}")], [], None
    gpus = smi.gpu_facts(root)
    drv, cuda = smi.driver(root)
    checks = gpu_checks.count(gpus, expected)
    checks.append(check("driver_version", OK, f"driver {drv or '?'} (CUDA {cuda or '?'} at most)"))
    for g in gpus:
        checks += gpu_checks.per_gpu(g)
    return checks, gpus, cuda


def doctor(req: DoctorRequest) -> DoctorResult:
    remote_dir = str(req.get("remote_dir") or "~")
    quick = bool(req.get("quick"))
    expected = req.get("expected_gpus")
    smi_timeout = float(req.get("smi_timeout") or smi.SMI_TIMEOUT_S)
    env = system.merged_env(req.get("env") or {})
    python = [str(w) for w in req.get("python") or ["python3"]]
    jobs: dict[str, Callable[[], Any]] = {} if quick else {"dcgm": system.dcgm_check}
    facts = _parallel(
        {
            **jobs,
            "xml": lambda: smi.read_xml(smi_timeout),
            "links": lambda: smi.nvlinks(smi_timeout),
            "kernel": lambda: kernel.read_log(),
            "torch": lambda: system.torch_facts(python, env, full=not quick),
        }
    )
    checks, gpus, cuda = gpu_part(facts["xml"], expected, req.get("gpu_named"))
    if gpus:
        links = facts["links"] if isinstance(facts["links"], dict) else {}
        checks += gpu_checks.nvlink(gpus, links)
        checks += gpu_checks.passing(gpus, checks, links)
        log = facts["kernel"]
        lines, source = (None, str(log)) if isinstance(log, Exception) else log
        if lines is None:
            checks.append(gpu_checks.kernel_skipped(source))
        else:
            found = gpu_checks.xid_checks(gpus, kernel.xids(lines))
            checks += found or [check("xid", OK, f"no Xid event in the kernel log since boot ({source})")]
    torch = facts["torch"] if not isinstance(facts["torch"], Exception) else {"error": str(facts["torch"])}
    checks += system.torch_checks(torch, len(gpus), cuda, full=not quick)
    checks += system.env_checks(env, len(gpus))
    checks += system.disk_checks(remote_dir, env)
    checks.append(system.shm_check(str(req.get("shm_dir") or system.SHM_DIR)))
    checks.append(system.nofile_check())
    dcgm = facts.get("dcgm")
    if isinstance(dcgm, Exception):
        checks.append(check("dcgm", FAIL, f"dcgmi diag could not run: {dcgm}"))
    elif dcgm is not None:
        checks.append(dcgm)
    measured: dict[str, Any] = {}
    if not quick:  # --quick measures nothing to compare with the history
        previous = history.load(remote_dir, HISTORY_LIMIT * 5)
        links = facts["links"] if isinstance(facts["links"], dict) else {}
        seconds = float(req.get("seconds") or ACTIVE_SECONDS)
        checks_a, measured = active_part(gpus, python, remote_dir, env, seconds, links)
        checks += checks_a + history.regressions(measured, previous)
    res = result(str(req.get("host") or ""), checks, measured, quick)
    try:
        history.store(remote_dir, res)
    except OSError as e:
        res["checks"].append(check("history", SKIPPED, f"result not stored on the host: {e.strerror}"))
    return res


def active_part(
    gpus: list[dict[str, Any]],
    python: list[str],
    remote_dir: str,
    env: dict[str, str],
    seconds: float,
    links: dict[int, Any],
) -> tuple[list[Check], dict[str, Any]]:
    figures = active.measure(python, remote_dir, env, seconds)
    nvswitch = len(gpus) > 1 and all(links.get(g["index"]) for g in gpus)
    return active.judge(figures, gpus, nvswitch)


def doctor_history(req: DoctorHistoryRequest) -> DoctorHistoryAnswer:
    """The newest results stored on the host, newest first."""
    limit = max(1, min(int(req.get("limit") or HISTORY_LIMIT), 200))
    return {"results": history.load(str(req.get("remote_dir") or "~"), limit)}
