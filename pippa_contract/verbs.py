"""The host agent's verbs as typed functions: one request type, one answer type and one function per
verb. The laptop calls these, never ``call("verb", {...})``; the agent dispatches on the same names.

A ``Caller`` is anything with the agent client's ``call(verb, args, timeout)`` (an agent session, a
one-shot caller, the connection keeper's fast path); a ``Streamer`` starts a verb that streams and
hands back its process. Standard library only: the laptop's fast path imports this module without
paramiko.
"""

from __future__ import annotations

from typing import Any, Dict, Protocol, Sequence, TypedDict, TypeVar

from pippa_contract.wire import (
    CHECK_PYTHON,
    FOLLOW,
    GPU_REPORT,
    INSTALL_BWRAP,
    INSTALL_UV,
    LAUNCH,
    LIST_RUNS,
    PROBE,
    PULL,
    READ,
    READ_RUN,
    RECEIVE_RUN,
    REMOVE_RUNS,
    RUN_CHECKPOINTS,
    SLURM_STOP,
    SLURM_SUBMIT,
    STOP,
    SYNC_APPLY,
    SYNC_LIST,
    SYNC_MARKER,
    WANDB_SYNC,
    WRITE_FILE,
)  # fmt: skip

Answer = Dict[str, Any]
P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class Caller(Protocol):
    def call(self, verb: str, args: dict[str, Any], timeout: float = ...) -> dict[str, Any]: ...


class Streamer(Protocol[P_co]):
    def stream(self, verb: str, args: dict[str, Any], timeout: float = ...) -> P_co: ...


# -- requests -------------------------------------------------------------------------------------
class LaunchRun(TypedDict, total=False):
    run_id: str
    run_json: str  # run.json's text; absent when resume: the run keeps its run.json
    cmd_sh: str
    supervisor: str | None  # supervise.py's source for a run with a restart policy
    resume: bool


class LaunchRequest(TypedDict, total=False):
    remote_dir: str
    session: str
    runs: list[LaunchRun]
    tmux_argv: list[str]
    replace: bool
    stamp: float
    sync_marker: dict[str, Any] | None


class SlurmSubmitRequest(TypedDict, total=False):
    remote_dir: str
    run_id: str
    run_json: str  # run.json's text
    script: str
    sync_marker: dict[str, Any] | None
    resume: bool
    stamp: float


# -- answers --------------------------------------------------------------------------------------
class ListRunsAnswer(TypedDict, total=False):
    now: float
    sessions: str  # tmux list-sessions text
    runs: list[dict[str, Any]]  # run facts (pippa_contract.runfacts)


class LaunchAnswer(TypedDict):
    identity: list[str]


class StopAnswer(TypedDict):
    killed_session: bool


class SlurmSubmitAnswer(TypedDict):
    job_id: str


class SlurmStopAnswer(TypedDict):
    was: str | None
    cancelled: bool


class CheckPythonAnswer(TypedDict, total=False):
    ok: bool
    python: str | None
    missing: bool
    line: str | None


class RemoveRunsAnswer(TypedDict):
    removed: list[str]
    refused: dict[str, str]
    bytes: int


class InstallUvAnswer(TypedDict):
    uv: str | None
    failures: list[str]


class InstallBwrapAnswer(TypedDict):
    installed: bool
    sandbox: dict[str, Any]
    why: str


class WandbSyncAnswer(TypedDict, total=False):
    synced: list[str]
    status: int  # wandb sync's exit status
    why: str | None


# -- the verbs ------------------------------------------------------------------------------------
def probe(agent: Caller, remote_dir: str) -> Answer:
    """Tools, GPUs, python, free disk and the sandbox's facts (`pippa up`)."""
    return agent.call(PROBE, {"remote_dir": remote_dir})


def install_uv(agent: Caller, timeout: float = 900) -> InstallUvAnswer:
    return agent.call(INSTALL_UV, {}, timeout=timeout)  # type: ignore[return-value]


def install_bwrap(agent: Caller, timeout: float = 900) -> InstallBwrapAnswer:
    return agent.call(INSTALL_BWRAP, {}, timeout=timeout)  # type: ignore[return-value]


def list_runs(agent: Caller, remote_dir: str, limit: int | None = None, summary: bool = False) -> Answer:
    """Every run directory's facts and the tmux sessions; ``summary`` adds each run's metrics summary."""
    args: dict[str, Any] = {"remote_dir": remote_dir}
    if limit is not None:
        args["limit"] = limit
    if summary:
        args["summary"] = True
    return agent.call(LIST_RUNS, args)


def launch(agent: Caller, request: LaunchRequest) -> LaunchAnswer:
    return agent.call(LAUNCH, dict(request))  # type: ignore[return-value]


def stop(
    agent: Caller, remote_dir: str, session: str, run_ids: Sequence[str], watch: str, grace_s: float,
    stamp: float,
) -> StopAnswer:  # fmt: skip
    """Mark the runs stop_requested, Ctrl-C the session, kill it once ``watch`` ended or after ``grace_s``."""
    args = {"remote_dir": remote_dir, "session": session, "run_ids": list(run_ids), "watch": watch,
            "grace_s": grace_s, "stamp": stamp}  # fmt: skip
    return agent.call(STOP, args, timeout=grace_s + 60)  # type: ignore[return-value]


def slurm_submit(agent: Caller, request: SlurmSubmitRequest) -> SlurmSubmitAnswer:
    return agent.call(SLURM_SUBMIT, dict(request))  # type: ignore[return-value]


def slurm_stop(
    agent: Caller, remote_dir: str, run_id: str, job_id: str, grace_s: float, stamp: float
) -> SlurmStopAnswer:
    args = {"remote_dir": remote_dir, "run_id": run_id, "job_id": job_id, "grace_s": grace_s, "stamp": stamp}
    return agent.call(SLURM_STOP, args, timeout=grace_s + 60)  # type: ignore[return-value]


def sync_list(agent: Caller, remote_dir: str) -> Answer:
    """``{"zstd": bool, "files": [[path, size, mtime], ...]}``."""
    return agent.call(SYNC_LIST, {"remote_dir": remote_dir})


def sync_marker(agent: Caller, remote_dir: str, marker: dict[str, Any]) -> None:
    agent.call(SYNC_MARKER, {"remote_dir": remote_dir, "marker": marker})


def write_file(agent: Caller, path: str, text: str, mode: int | None = None) -> None:
    args: dict[str, Any] = {"path": path, "text": text}
    if mode is not None:
        args["mode"] = mode
    agent.call(WRITE_FILE, args)


def check_python(
    agent: Caller, argv: Sequence[str], remote_dir: str, module: str | None, timeout: float = 150
) -> CheckPythonAnswer:
    args = {"argv": list(argv), "remote_dir": remote_dir, "module": module}
    return agent.call(CHECK_PYTHON, args, timeout=timeout)  # type: ignore[return-value]


def run_checkpoints(agent: Caller, remote_dir: str, run_id: str) -> list[str]:
    """The run's ``checkpoint-N`` names, oldest first."""
    answer = agent.call(RUN_CHECKPOINTS, {"remote_dir": remote_dir, "run_id": run_id})
    return [str(c) for c in answer.get("checkpoints") or []]


def remove_runs(
    agent: Caller, remote_dir: str, run_ids: Sequence[str], dry_run: bool, timeout: float = 600
) -> RemoveRunsAnswer:
    args = {"remote_dir": remote_dir, "run_ids": list(run_ids), "dry_run": dry_run}
    return agent.call(REMOVE_RUNS, args, timeout=timeout)  # type: ignore[return-value]


def wandb_sync(
    agent: Caller, run_dir: str, remote_dir: str, python: Sequence[str], secrets_path: str,
    env: dict[str, str], timeout_s: float,
) -> WandbSyncAnswer:  # fmt: skip
    args = {"run_dir": run_dir, "remote_dir": remote_dir, "python": list(python),
            "secrets_path": secrets_path, "env": env, "timeout": timeout_s}  # fmt: skip
    return agent.call(WANDB_SYNC, args, timeout=timeout_s + 30)  # type: ignore[return-value]


class GpuReportAnswer(TypedDict, total=False):
    smi: bool  # False: nvidia-smi is not installed
    gpus: str  # the GPU query's output (CSV, or the driver's complaint)
    apps: str  # the compute-process query's output


def gpu_report(agent: Caller, query: Sequence[str], apps: Sequence[str]) -> GpuReportAnswer:
    """Run nvidia-smi's two queries (argument lists, no shell) in one request."""
    return agent.call(GPU_REPORT, {"query": list(query), "apps": list(apps)})  # type: ignore[return-value]


# -- streaming verbs: the caller owns the process ---------------------------------------------------
def read(agent: Streamer[P], path: str, offset: int = 0) -> P:
    """The file's raw bytes from ``offset``, then the process ends."""
    return agent.stream(READ, {"path": path, "offset": offset})


def read_run(agent: Streamer[P], remote_dir: str, name: str | None, limit: int | None = None) -> P:
    """One line: the ``list_runs`` answer plus ``"chosen"``, the run id ``name`` means there
    (``pippa_contract.runpick``; None: the newest run; null when it means none); then that run's
    output.log, raw, and the process ends."""
    args: dict[str, Any] = {"remote_dir": remote_dir, "name": name}
    if limit is not None:
        args["limit"] = limit
    return agent.stream(READ_RUN, args)


def follow(agent: Streamer[P], path: str, offset: int, end_file: str | None, session: str | None) -> P:
    """The file's bytes as they come, until ``end_file`` exists or ``session`` is gone."""
    return agent.stream(FOLLOW, {"path": path, "offset": offset, "end_file": end_file, "session": session})


def pull(agent: Streamer[P], run_dir: str, have: dict[str, list[Any]], checkpoint: str | None) -> P:
    return agent.stream(PULL, {"run_dir": run_dir, "have": have, "checkpoint": checkpoint})


def receive_run(
    agent: Streamer[P], remote_dir: str, run_id: str, files: list[list[Any]], meta: dict[str, Any]
) -> P:
    """A run directory from another host: ``files`` (``[rel, size, mtime]``) follow the request on
    stdin, each as frames ending ``0\n`` then its sha256 line; answers ``{"run_dir", "files", "bytes"}``."""
    return agent.stream(
        RECEIVE_RUN, {"remote_dir": remote_dir, "run_id": run_id, "files": files, "meta": meta}
    )


def sync_apply(agent: Streamer[P], args: dict[str, Any]) -> P:
    """Reads a zstd (or gzip) tar after the request; answers ``{"sent", "deleted"}``."""
    return agent.stream(SYNC_APPLY, args)
