"""The host agent's verbs as typed functions: one request type, one answer type and one function per
verb. The laptop calls these, never ``call("verb", {...})``; the agent's handler for each verb takes
the same request type and returns the same answer type (``pippa_contract.messages``, whose
``VERB_TYPES`` ties them to the verb; the agent dispatches from ``pippa_agent.serve.VERBS``, and
tests/contract/test_verbs.py checks the two tables agree).

A ``Caller`` is anything with the agent client's ``call(verb, args, timeout)`` (an agent session, a
one-shot caller, the connection keeper's fast path); a ``Streamer`` starts a verb that streams and
hands back its process. Standard library only: the laptop's fast path imports this module without
asyncssh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, TypeVar, cast

from pippa_contract.wire import (
    CHECK_PYTHON,
    DOCTOR,
    DOCTOR_HISTORY,
    FOLLOW,
    GPU_REPORT,
    INSTALL_BWRAP,
    INSTALL_UV,
    LAUNCH,
    LINK_PROGRAM,
    LIST_RUNS,
    PROBE,
    PULL,
    READ,
    READ_RUN,
    RECEIVE_RUN,
    REMOVE_RUNS,
    RUN_CHECKPOINTS,
    SAMPLES,
    SLURM_STOP,
    SLURM_SUBMIT,
    STOP,
    SYNC_APPLY,
    SYNC_LIST,
    SYNC_MARKER,
    WANDB_SYNC,
    WRITE_FILE,
)

if TYPE_CHECKING:  # annotations and casts only: the TypedDicts cost a cold command ~1.4 ms to build
    from pippa_contract.messages import (
        CheckPythonAnswer,
        CheckPythonRequest,
        DoctorHistoryAnswer,
        DoctorHistoryRequest,
        DoctorRequest,
        DoctorResult,
        Empty,
        FollowRequest,
        GpuReportAnswer,
        GpuReportRequest,
        InstallBwrapAnswer,
        InstallUvAnswer,
        LaunchAnswer,
        LaunchRequest,
        LinkProgramRequest,
        ListRunsAnswer,
        ListRunsRequest,
        ProbeAnswer,
        ProbeRequest,
        PullRequest,
        ReadRequest,
        ReadRunRequest,
        ReceiveRunRequest,
        RemoteDirRequest,
        RemoveRunsAnswer,
        RemoveRunsRequest,
        RunCheckpointsAnswer,
        RunRequest,
        SamplesAnswer,
        SamplesRequest,
        SlurmStopAnswer,
        SlurmStopRequest,
        SlurmSubmitAnswer,
        SlurmSubmitRequest,
        StopAnswer,
        StopRequest,
        SyncApplyRequest,
        SyncListAnswer,
        SyncMarkerRequest,
        WandbSyncAnswer,
        WandbSyncRequest,
        WriteFileRequest,
    )

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class Caller(Protocol):
    def call(self, verb: str, args: dict[str, Any], timeout: float = ...) -> dict[str, Any]: ...


class Streamer(Protocol[P_co]):
    def stream(self, verb: str, args: dict[str, Any], timeout: float = ...) -> P_co: ...


def _ask(
    agent: Caller, verb: str, request: Mapping[str, Any], timeout: float | None = None
) -> dict[str, Any]:
    """One JSON verb: ``request`` (the verb's request type) out, its answer back; each verb's function
    names the answer's type (a cast: a TypedDict is checked statically, not at run time)."""
    args: dict[str, Any] = dict(request)
    return agent.call(verb, args) if timeout is None else agent.call(verb, args, timeout=timeout)


# -- the verbs ------------------------------------------------------------------------------------
def probe(agent: Caller, remote_dir: str) -> ProbeAnswer:
    """Tools, GPUs, python, free disk and the sandbox's facts (`pippa up`)."""
    request: ProbeRequest = {"remote_dir": remote_dir}
    return cast("ProbeAnswer", _ask(agent, PROBE, request))


def install_uv(agent: Caller, timeout: float = 900) -> InstallUvAnswer:
    request: Empty = {}
    return cast("InstallUvAnswer", _ask(agent, INSTALL_UV, request, timeout))


def install_bwrap(agent: Caller, timeout: float = 900) -> InstallBwrapAnswer:
    request: Empty = {}
    return cast("InstallBwrapAnswer", _ask(agent, INSTALL_BWRAP, request, timeout))


def list_runs(
    agent: Caller, remote_dir: str, limit: int | None = None, summary: bool = False
) -> ListRunsAnswer:
    """Every run directory's facts and the tmux sessions; ``summary`` adds each run's metrics summary."""
    request: ListRunsRequest = {"remote_dir": remote_dir}
    if limit is not None:
        request["limit"] = limit
    if summary:
        request["summary"] = True
    return cast("ListRunsAnswer", _ask(agent, LIST_RUNS, request))


def launch(agent: Caller, request: LaunchRequest) -> LaunchAnswer:
    return cast("LaunchAnswer", _ask(agent, LAUNCH, request))


def stop(
    agent: Caller,
    remote_dir: str,
    session: str,
    run_ids: Sequence[str],
    watch: str,
    grace_s: float,
    stamp: float,
) -> StopAnswer:
    """Mark the runs stop_requested, Ctrl-C the session, kill it once ``watch`` ended or after ``grace_s``."""
    request: StopRequest = {
        "remote_dir": remote_dir,
        "session": session,
        "run_ids": list(run_ids),
        "watch": watch,
        "grace_s": grace_s,
        "stamp": stamp,
    }
    return cast("StopAnswer", _ask(agent, STOP, request, grace_s + 60))


def slurm_submit(agent: Caller, request: SlurmSubmitRequest) -> SlurmSubmitAnswer:
    return cast("SlurmSubmitAnswer", _ask(agent, SLURM_SUBMIT, request))


def slurm_stop(
    agent: Caller, remote_dir: str, run_id: str, job_id: str, grace_s: float, stamp: float
) -> SlurmStopAnswer:
    request: SlurmStopRequest = {
        "remote_dir": remote_dir,
        "run_id": run_id,
        "job_id": job_id,
        "grace_s": grace_s,
        "stamp": stamp,
    }
    return cast("SlurmStopAnswer", _ask(agent, SLURM_STOP, request, grace_s + 60))


def sync_list(agent: Caller, remote_dir: str) -> SyncListAnswer:
    """``{"zstd": bool, "files": [[path, size, mtime], ...]}``."""
    request: RemoteDirRequest = {"remote_dir": remote_dir}
    return cast("SyncListAnswer", _ask(agent, SYNC_LIST, request))


def sync_marker(agent: Caller, remote_dir: str, marker: dict[str, Any]) -> None:
    request: SyncMarkerRequest = {"remote_dir": remote_dir, "marker": marker}
    _ask(agent, SYNC_MARKER, request)


def write_file(agent: Caller, path: str, text: str, mode: int | None = None) -> None:
    request: WriteFileRequest = {"path": path, "text": text}
    if mode is not None:
        request["mode"] = mode
    _ask(agent, WRITE_FILE, request)


def link_program(agent: Caller, path: str, sha: str, pin: str) -> None:
    """Make ``path`` a link to the host program of bundle ``sha``, kept by the cache under ``pin``."""
    request: LinkProgramRequest = {"path": path, "sha": sha, "pin": pin}
    _ask(agent, LINK_PROGRAM, request)


def check_python(
    agent: Caller, argv: Sequence[str], remote_dir: str, module: str | None, timeout: float = 150
) -> CheckPythonAnswer:
    request: CheckPythonRequest = {"argv": list(argv), "remote_dir": remote_dir, "module": module}
    return cast("CheckPythonAnswer", _ask(agent, CHECK_PYTHON, request, timeout))


def run_checkpoints(agent: Caller, remote_dir: str, run_id: str) -> tuple[list[str], list[str]]:
    """The run's whole ``checkpoint-N`` names, oldest first, and one line per torn one passed over."""
    request: RunRequest = {"remote_dir": remote_dir, "run_id": run_id}
    answer = cast("RunCheckpointsAnswer", _ask(agent, RUN_CHECKPOINTS, request))
    return [str(c) for c in answer.get("checkpoints") or []], [str(c) for c in answer.get("skipped") or []]


def remove_runs(
    agent: Caller, remote_dir: str, run_ids: Sequence[str], dry_run: bool, timeout: float = 600
) -> RemoveRunsAnswer:
    request: RemoveRunsRequest = {"remote_dir": remote_dir, "run_ids": list(run_ids), "dry_run": dry_run}
    return cast("RemoveRunsAnswer", _ask(agent, REMOVE_RUNS, request, timeout))


def wandb_sync(
    agent: Caller,
    run_dir: str,
    remote_dir: str,
    python: Sequence[str],
    secrets_path: str,
    env: dict[str, str],
    timeout_s: float,
) -> WandbSyncAnswer:
    request: WandbSyncRequest = {
        "run_dir": run_dir,
        "remote_dir": remote_dir,
        "python": list(python),
        "secrets_path": secrets_path,
        "env": env,
        "timeout": timeout_s,
    }
    return cast("WandbSyncAnswer", _ask(agent, WANDB_SYNC, request, timeout_s + 30))


def gpu_report(agent: Caller, query: Sequence[str], apps: Sequence[str]) -> GpuReportAnswer:
    """Run nvidia-smi's two queries (argument lists, no shell) in one request."""
    request: GpuReportRequest = {"query": list(query), "apps": list(apps)}
    return cast("GpuReportAnswer", _ask(agent, GPU_REPORT, request))


def doctor(agent: Caller, request: DoctorRequest, timeout: float = 300) -> DoctorResult:
    """Passive checks, then (unless ``quick``) the active ones; the result is also stored on the host."""
    return cast("DoctorResult", _ask(agent, DOCTOR, request, timeout))


def doctor_history(agent: Caller, remote_dir: str, limit: int = 10) -> DoctorHistoryAnswer:
    """The doctor results kept on the host, newest first."""
    request: DoctorHistoryRequest = {"remote_dir": remote_dir, "limit": limit}
    return cast("DoctorHistoryAnswer", _ask(agent, DOCTOR_HISTORY, request))


def samples(agent: Caller, request: SamplesRequest) -> SamplesAnswer:
    """Rows of a run's samples.jsonl, read from its end on the host (``pippa samples``, the dashboard)."""
    return cast("SamplesAnswer", _ask(agent, SAMPLES, request))


# -- streaming verbs: the caller owns the process ---------------------------------------------------
def read(agent: Streamer[P], path: str, offset: int = 0, redact: bool = False) -> P:
    """The file's raw bytes from ``offset`` (``redact``: a log shown, its secrets masked with as many
    ``*``, so offsets hold), then the process ends."""
    request: ReadRequest = {"path": path, "offset": offset}
    if redact:
        request["redact"] = True
    return agent.stream(READ, dict(request))


def read_run(
    agent: Streamer[P], remote_dir: str, name: str | None, limit: int | None = None, redact: bool = False
) -> P:
    """One line (``ReadRunHead``): the ``list_runs`` answer plus ``"chosen"``, the run id ``name``
    means there (``pippa_contract.runpick``; None: the newest run; null when it means none); then that
    run's output.log (raw, or masked with ``redact``), and the process ends."""
    request: ReadRunRequest = {"remote_dir": remote_dir, "name": name}
    if limit is not None:
        request["limit"] = limit
    if redact:
        request["redact"] = True
    return agent.stream(READ_RUN, dict(request))


def follow(
    agent: Streamer[P],
    path: str,
    offset: int,
    end_file: str | None,
    session: str | None,
    redact: bool = False,
) -> P:
    """The file's bytes as they come (masked with ``redact``), until ``end_file`` exists or ``session``
    is gone."""
    request: FollowRequest = {"path": path, "offset": offset, "end_file": end_file, "session": session}
    if redact:
        request["redact"] = True
    return agent.stream(FOLLOW, dict(request))


def pull(agent: Streamer[P], run_dir: str, have: dict[str, list[Any]], checkpoint: str | None) -> P:
    """One line (``PullManifest``), then the files' bytes as frames."""
    request: PullRequest = {"run_dir": run_dir, "have": have, "checkpoint": checkpoint}
    return agent.stream(PULL, dict(request))


def receive_run(agent: Streamer[P], request: ReceiveRunRequest) -> P:
    """A run directory from another host: its files (``[rel, size, mtime]``) follow the request on
    stdin, each as frames ending ``0\n`` then its sha256 line; answers ``ReceiveRunAnswer`` once all
    arrived (pippa_agent.receive)."""
    return agent.stream(RECEIVE_RUN, dict(request))


def sync_apply(agent: Streamer[P], request: SyncApplyRequest) -> P:
    """Reads a zstd (or gzip) tar after the request; answers ``SyncApplyAnswer`` once it has ended."""
    return agent.stream(SYNC_APPLY, dict(request))
