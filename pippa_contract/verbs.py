"""The host agent's verbs as typed functions: one request type, one answer type and one function per
verb. The laptop calls these, never ``call("verb", {...})``; the agent's handler for each verb takes
the same request type and returns the same answer type (``VERB_TYPES``; the agent dispatches from
``pippa_agent.serve.VERBS``, and tests/contract/test_verbs.py checks the two tables agree).

A ``Caller`` is anything with the agent client's ``call(verb, args, timeout)`` (an agent session, a
one-shot caller, the connection keeper's fast path); a ``Streamer`` starts a verb that streams and
hands back its process. Standard library only: the laptop's fast path imports this module without
paramiko.
"""

from __future__ import annotations

from typing import Any, NotRequired, Protocol, Sequence, TypedDict, TypeVar, cast

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

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class Caller(Protocol):
    def call(self, verb: str, args: dict[str, Any], timeout: float = ...) -> dict[str, Any]: ...


class Streamer(Protocol[P_co]):
    def stream(self, verb: str, args: dict[str, Any], timeout: float = ...) -> P_co: ...


class Empty(TypedDict):
    """A request that carries nothing, or an answer that says nothing but success."""


# -- probe and install (`pippa up`, the launch's check) -----------------------------------------------
class ProbeRequest(TypedDict):
    remote_dir: str  # free disk is measured where it is (or its nearest existing parent)


class SandboxFacts(TypedDict):
    bwrap: str | None  # bubblewrap's path
    works: bool
    why: str  # why it does not, "" when it does
    root: bool
    sudo: bool  # passwordless sudo
    userns: bool | None  # unprivileged user namespaces allowed (None: not said)
    apt: bool
    seccomp: bool  # libseccomp2, for the sandbox's filter
    cgroups: bool  # writable cgroups: memory and process caps for a run's processes together
    level: str  # the strongest sandbox.isolation a code recipe can ask for here


class ProbeAnswer(TypedDict):
    python: str  # the agent's python3 version, "3.11.4"
    python_path: str
    tmux: str | None  # tmux -V, None when missing
    uv: str | None
    curl: bool
    gpus: list[str]  # nvidia-smi -L lines
    driver: str | None
    cuda: str | None
    free_disk_gb: float
    sandbox: SandboxFacts


class InstallUvAnswer(TypedDict):
    uv: str | None
    failures: list[str]


class InstallBwrapAnswer(TypedDict):
    installed: bool
    sandbox: SandboxFacts
    why: NotRequired[str]


class CheckPythonRequest(TypedDict):
    argv: list[str]  # the host's training python, as an argument list
    remote_dir: str
    module: str | None  # a module it must import (the trainer's package), None: only that it runs


class CheckPythonAnswer(TypedDict):
    ok: bool
    python: str | None
    missing: bool
    line: str | None


# -- runs and job control -----------------------------------------------------------------------------
class ListRunsRequest(TypedDict):
    remote_dir: str
    limit: NotRequired[int]  # the newest N run directories (50)
    summary: NotRequired[bool]  # add each run's metrics summary


class ListRunsAnswer(TypedDict):
    now: float  # the host's clock
    sessions: str  # tmux list-sessions text (pippa_contract.sessions.LIST_FORMAT)
    runs: list[dict[str, Any]]  # run facts (pippa_contract.runfacts)


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


class LaunchAnswer(TypedDict):
    identity: str  # the new session's identity (pippa_contract.sessions.IDENTITY_FORMAT)


class StopRequest(TypedDict):
    remote_dir: str
    session: str
    run_ids: list[str]
    watch: str  # the run whose exit code ends the wait
    grace_s: float
    stamp: float


class StopAnswer(TypedDict):
    killed_session: bool


class RunRequest(TypedDict):
    remote_dir: str
    run_id: str


class RunCheckpointsAnswer(TypedDict):
    checkpoints: list[str]  # ``checkpoint-N`` names, oldest first


class RemoveRunsRequest(TypedDict):
    remote_dir: str
    run_ids: list[str]
    dry_run: bool


class RemoveRunsAnswer(TypedDict):
    removed: list[str]
    refused: dict[str, str]
    bytes: int


class SlurmSubmitRequest(TypedDict, total=False):
    remote_dir: str
    run_id: str
    run_json: str  # run.json's text
    script: str
    sync_marker: dict[str, Any] | None
    resume: bool
    stamp: float


class SlurmSubmitAnswer(TypedDict):
    job_id: str


class SlurmStopRequest(TypedDict):
    remote_dir: str
    run_id: str
    job_id: str
    grace_s: float
    stamp: float


class SlurmStopAnswer(TypedDict):
    was: str | None
    cancelled: bool


# -- sync and files -----------------------------------------------------------------------------------
class RemoteDirRequest(TypedDict):
    remote_dir: str


class SyncListAnswer(TypedDict):
    zstd: bool  # the host can unpack zstd
    files: list[list[Any]]  # [path, size, whole-second mtime]


class SyncMarkerRequest(TypedDict):
    remote_dir: str
    marker: dict[str, Any]


class SyncApplyRequest(TypedDict):
    remote_dir: str
    send: list[str]
    delete: list[str]
    marker: dict[str, Any]
    zstd: bool  # the stream after the request is zstd (else gzip)


class SyncApplyAnswer(TypedDict):
    sent: int
    deleted: int


class WriteFileRequest(TypedDict):
    path: str
    text: str
    mode: NotRequired[int]  # 0o644


class WandbSyncRequest(TypedDict):
    run_dir: str
    remote_dir: str
    python: list[str]
    secrets_path: str
    env: dict[str, str]
    timeout: float


class WandbSyncAnswer(TypedDict, total=False):
    synced: list[str]
    status: int  # wandb sync's exit status
    why: str | None


class GpuReportRequest(TypedDict):
    query: list[str]  # nvidia-smi's GPU query, an argument list
    apps: list[str]  # its compute-process query


class GpuReportAnswer(TypedDict, total=False):
    smi: bool  # False: nvidia-smi is not installed
    gpus: str  # the GPU query's output (CSV, or the driver's complaint)
    apps: str  # the compute-process query's output


# -- streams: the answer is bytes that follow (None), or a first line and then bytes -------------------
class ReadRequest(TypedDict):
    path: str
    offset: NotRequired[int]


class ReadRunRequest(TypedDict):
    remote_dir: str
    name: str | None
    limit: NotRequired[int]


class ReadRunHead(ListRunsAnswer):
    """read_run's first line: the listing and the run the name means there (null: none)."""

    chosen: str | None


class FollowRequest(TypedDict):
    path: str
    offset: int
    end_file: str | None
    session: str | None
    watch_stdin: NotRequired[bool]  # end when the client closes stdin (True)
    check_s: NotRequired[float]  # how often the end condition is checked (0.5)


class PullRequest(TypedDict):
    run_dir: str
    have: dict[str, list[Any]]  # rel -> [size, tail_digest] of what the laptop has
    checkpoint: str | None


class PullManifest(TypedDict):
    files: list[list[Any]]  # [rel, size, offset, mtime]
    checkpoints: list[str]
    chosen: str | None
    send: int  # bytes that follow


# Each verb's request type and answer type: the laptop's function below builds the one and returns the
# other; the agent's handler (pippa_agent.serve.VERBS) is annotated with both. A stream verb's answer
# is its first line (read_run, pull) or None (bytes only). tests/contract/test_verbs.py holds both
# sides to this table.
VERB_TYPES: dict[str, tuple[object, object]] = {
    PROBE: (ProbeRequest, ProbeAnswer),
    INSTALL_UV: (Empty, InstallUvAnswer),
    INSTALL_BWRAP: (Empty, InstallBwrapAnswer),
    CHECK_PYTHON: (CheckPythonRequest, CheckPythonAnswer),
    LIST_RUNS: (ListRunsRequest, ListRunsAnswer),
    LAUNCH: (LaunchRequest, LaunchAnswer),
    STOP: (StopRequest, StopAnswer),
    RUN_CHECKPOINTS: (RunRequest, RunCheckpointsAnswer),
    REMOVE_RUNS: (RemoveRunsRequest, RemoveRunsAnswer),
    SLURM_SUBMIT: (SlurmSubmitRequest, SlurmSubmitAnswer),
    SLURM_STOP: (SlurmStopRequest, SlurmStopAnswer),
    SYNC_LIST: (RemoteDirRequest, SyncListAnswer),
    SYNC_APPLY: (SyncApplyRequest, SyncApplyAnswer),
    SYNC_MARKER: (SyncMarkerRequest, Empty),
    WRITE_FILE: (WriteFileRequest, Empty),
    WANDB_SYNC: (WandbSyncRequest, WandbSyncAnswer),
    GPU_REPORT: (GpuReportRequest, GpuReportAnswer),
    READ: (ReadRequest, None),
    READ_RUN: (ReadRunRequest, ReadRunHead),
    FOLLOW: (FollowRequest, None),
    PULL: (PullRequest, PullManifest),
}
A = TypeVar("A")


def _ask(agent: Caller, verb: str, request: Any, answer: type[A], timeout: float | None = None) -> A:
    """One JSON verb: ``request`` (the verb's request type) out, the answer read as ``answer``.
    A TypedDict is checked statically, not at run time: the cast only names what the agent sent."""
    args: dict[str, Any] = dict(request)
    got = agent.call(verb, args) if timeout is None else agent.call(verb, args, timeout=timeout)
    return cast(A, got)


# -- the verbs ------------------------------------------------------------------------------------
def probe(agent: Caller, remote_dir: str) -> ProbeAnswer:
    """Tools, GPUs, python, free disk and the sandbox's facts (`pippa up`)."""
    request: ProbeRequest = {"remote_dir": remote_dir}
    return _ask(agent, PROBE, request, ProbeAnswer)


def install_uv(agent: Caller, timeout: float = 900) -> InstallUvAnswer:
    request: Empty = {}
    return _ask(agent, INSTALL_UV, request, InstallUvAnswer, timeout)


def install_bwrap(agent: Caller, timeout: float = 900) -> InstallBwrapAnswer:
    request: Empty = {}
    return _ask(agent, INSTALL_BWRAP, request, InstallBwrapAnswer, timeout)


def list_runs(
    agent: Caller, remote_dir: str, limit: int | None = None, summary: bool = False
) -> ListRunsAnswer:
    """Every run directory's facts and the tmux sessions; ``summary`` adds each run's metrics summary."""
    request: ListRunsRequest = {"remote_dir": remote_dir}
    if limit is not None:
        request["limit"] = limit
    if summary:
        request["summary"] = True
    return _ask(agent, LIST_RUNS, request, ListRunsAnswer)


def launch(agent: Caller, request: LaunchRequest) -> LaunchAnswer:
    return _ask(agent, LAUNCH, request, LaunchAnswer)


def stop(
    agent: Caller, remote_dir: str, session: str, run_ids: Sequence[str], watch: str, grace_s: float,
    stamp: float,
) -> StopAnswer:  # fmt: skip
    """Mark the runs stop_requested, Ctrl-C the session, kill it once ``watch`` ended or after ``grace_s``."""
    request: StopRequest = {"remote_dir": remote_dir, "session": session, "run_ids": list(run_ids),
                            "watch": watch, "grace_s": grace_s, "stamp": stamp}  # fmt: skip
    return _ask(agent, STOP, request, StopAnswer, grace_s + 60)


def slurm_submit(agent: Caller, request: SlurmSubmitRequest) -> SlurmSubmitAnswer:
    return _ask(agent, SLURM_SUBMIT, request, SlurmSubmitAnswer)


def slurm_stop(
    agent: Caller, remote_dir: str, run_id: str, job_id: str, grace_s: float, stamp: float
) -> SlurmStopAnswer:
    request: SlurmStopRequest = {"remote_dir": remote_dir, "run_id": run_id, "job_id": job_id,
                                 "grace_s": grace_s, "stamp": stamp}  # fmt: skip
    return _ask(agent, SLURM_STOP, request, SlurmStopAnswer, grace_s + 60)


def sync_list(agent: Caller, remote_dir: str) -> SyncListAnswer:
    """``{"zstd": bool, "files": [[path, size, mtime], ...]}``."""
    request: RemoteDirRequest = {"remote_dir": remote_dir}
    return _ask(agent, SYNC_LIST, request, SyncListAnswer)


def sync_marker(agent: Caller, remote_dir: str, marker: dict[str, Any]) -> None:
    request: SyncMarkerRequest = {"remote_dir": remote_dir, "marker": marker}
    _ask(agent, SYNC_MARKER, request, Empty)


def write_file(agent: Caller, path: str, text: str, mode: int | None = None) -> None:
    request: WriteFileRequest = {"path": path, "text": text}
    if mode is not None:
        request["mode"] = mode
    _ask(agent, WRITE_FILE, request, Empty)


def check_python(
    agent: Caller, argv: Sequence[str], remote_dir: str, module: str | None, timeout: float = 150
) -> CheckPythonAnswer:
    request: CheckPythonRequest = {"argv": list(argv), "remote_dir": remote_dir, "module": module}
    return _ask(agent, CHECK_PYTHON, request, CheckPythonAnswer, timeout)


def run_checkpoints(agent: Caller, remote_dir: str, run_id: str) -> list[str]:
    """The run's ``checkpoint-N`` names, oldest first."""
    request: RunRequest = {"remote_dir": remote_dir, "run_id": run_id}
    answer = _ask(agent, RUN_CHECKPOINTS, request, RunCheckpointsAnswer)
    return [str(c) for c in answer.get("checkpoints") or []]


def remove_runs(
    agent: Caller, remote_dir: str, run_ids: Sequence[str], dry_run: bool, timeout: float = 600
) -> RemoveRunsAnswer:
    request: RemoveRunsRequest = {"remote_dir": remote_dir, "run_ids": list(run_ids), "dry_run": dry_run}
    return _ask(agent, REMOVE_RUNS, request, RemoveRunsAnswer, timeout)


def wandb_sync(
    agent: Caller, run_dir: str, remote_dir: str, python: Sequence[str], secrets_path: str,
    env: dict[str, str], timeout_s: float,
) -> WandbSyncAnswer:  # fmt: skip
    request: WandbSyncRequest = {"run_dir": run_dir, "remote_dir": remote_dir, "python": list(python),
                                 "secrets_path": secrets_path, "env": env, "timeout": timeout_s}  # fmt: skip
    return _ask(agent, WANDB_SYNC, request, WandbSyncAnswer, timeout_s + 30)


def gpu_report(agent: Caller, query: Sequence[str], apps: Sequence[str]) -> GpuReportAnswer:
    """Run nvidia-smi's two queries (argument lists, no shell) in one request."""
    request: GpuReportRequest = {"query": list(query), "apps": list(apps)}
    return _ask(agent, GPU_REPORT, request, GpuReportAnswer)


# -- streaming verbs: the caller owns the process ---------------------------------------------------
def read(agent: Streamer[P], path: str, offset: int = 0) -> P:
    """The file's raw bytes from ``offset``, then the process ends."""
    request: ReadRequest = {"path": path, "offset": offset}
    return agent.stream(READ, dict(request))


def read_run(agent: Streamer[P], remote_dir: str, name: str | None, limit: int | None = None) -> P:
    """One line (``ReadRunHead``): the ``list_runs`` answer plus ``"chosen"``, the run id ``name``
    means there (``pippa_contract.runpick``; None: the newest run; null when it means none); then that
    run's output.log, raw, and the process ends."""
    request: ReadRunRequest = {"remote_dir": remote_dir, "name": name}
    if limit is not None:
        request["limit"] = limit
    return agent.stream(READ_RUN, dict(request))


def follow(agent: Streamer[P], path: str, offset: int, end_file: str | None, session: str | None) -> P:
    """The file's bytes as they come, until ``end_file`` exists or ``session`` is gone."""
    request: FollowRequest = {"path": path, "offset": offset, "end_file": end_file, "session": session}
    return agent.stream(FOLLOW, dict(request))


def pull(agent: Streamer[P], run_dir: str, have: dict[str, list[Any]], checkpoint: str | None) -> P:
    """One line (``PullManifest``), then the files' bytes as frames."""
    request: PullRequest = {"run_dir": run_dir, "have": have, "checkpoint": checkpoint}
    return agent.stream(PULL, dict(request))


def sync_apply(agent: Streamer[P], request: SyncApplyRequest) -> P:
    """Reads a zstd (or gzip) tar after the request; answers ``SyncApplyAnswer`` once it has ended."""
    return agent.stream(SYNC_APPLY, dict(request))
