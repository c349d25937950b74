"""The agent's messages: each verb's request and answer as a ``TypedDict``, and ``VERB_TYPES``, the
table that ties them to the verb. The laptop's functions (``pippa_contract.verbs``) build the one and
return the other; the agent's handlers (``pippa_agent.serve.VERBS``) are annotated with both, importing
this module only under ``TYPE_CHECKING`` (it is not in the host bundle: the agent never loads it), and
so do the laptop's modules: building these classes would cost every cold command ~1.4 ms of CPU."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from pippa_contract.doctor_messages import (  # re-exported: VERB_TYPES names them
    Check as Check,
)
from pippa_contract.doctor_messages import (
    DoctorHistoryAnswer as DoctorHistoryAnswer,
)
from pippa_contract.doctor_messages import (
    DoctorHistoryRequest as DoctorHistoryRequest,
)
from pippa_contract.doctor_messages import (
    DoctorRequest as DoctorRequest,
)
from pippa_contract.doctor_messages import (
    DoctorResult as DoctorResult,
)
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
    cgroups_why: str  # which cgroups (root's, a delegated subtree: cgroupdeleg) or why none
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
    resume: bool


class LaunchRequest(TypedDict, total=False):
    remote_dir: str
    session: str
    runs: list[LaunchRun]
    tmux_argv: list[str]
    replace: bool
    stamp: float
    sync_marker: dict[str, Any] | None
    program: str  # the bundle's sha: each run links RUN_DIR/agent.pyz to that host program


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


class RunCheckpointsAnswer(TypedDict, total=False):
    checkpoints: list[str]  # ``checkpoint-N`` names, oldest first
    skipped: list[str]  # ``checkpoint-7 skipped: <why>``: torn ones passed over (set aside as .torn)


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
    program: str  # the bundle's sha: each run links RUN_DIR/agent.pyz to that host program
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


class ReceiveRunRequest(TypedDict):
    remote_dir: str
    run_id: str
    files: list[list[Any]]  # [rel, size, mtime], in the order their bytes follow the request
    meta: dict[str, Any]  # keys set in the arriving run.json (the new host, its command, the move)


class ReceiveRunAnswer(TypedDict):
    run_dir: str
    files: int
    bytes: int


class LinkProgramRequest(TypedDict):
    path: str  # the link to make (~ allowed)
    sha: str  # the bundle whose host program it names
    pin: str  # the pin that keeps that version in the cache


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
    redact: NotRequired[bool]  # a log shown: secrets masked, same length (pippa_contract.secretprints)


class ReadRunRequest(TypedDict):
    remote_dir: str
    name: str | None
    limit: NotRequired[int]
    redact: NotRequired[bool]  # as ReadRequest's


class ReadRunHead(ListRunsAnswer):
    """read_run's first line: the listing and the run the name means there (null: none)."""

    chosen: str | None


class FollowRequest(TypedDict):
    path: str
    offset: int
    end_file: str | None
    session: str | None
    watch_stdin: NotRequired[bool]  # end when the client closes stdin (True)
    redact: NotRequired[bool]  # as ReadRequest's
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
# -- what the model wrote (`pippa samples`, the dashboard) ---------------------------------------------
class SamplesRequest(TypedDict, total=False):
    """The ``samples`` verb (pippa_agent.samples; pippa_contract.samples.answer)."""

    remote_dir: str
    name: str | None  # run id, session or short id (pippa_contract.runpick); None: the newest run
    step: int | None  # None: the newest sampled step
    n: int
    best: bool
    worst: bool
    grep: str | None
    kind: str | None  # "train", "eval" or "selfplay"
    diff: list[int] | None  # [A, B]: the same prompts' rows at two steps


class SamplesAnswer(TypedDict, total=False):
    run_id: str
    rows: list[dict[str, Any]]  # pippa_contract.samples.sample_row
    step: int | None
    prev: int | None  # the sampled step before ``step``
    next: int | None  # the sampled step after it
    size: int  # samples.jsonl's bytes
    pairs: list[list[dict[str, Any]]]  # with diff: [row at A, row at B] per shared prompt
    diff: list[int]
    alarms: list[dict[str, Any]]  # alarms.json's (pippa_contract.alarms)


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
    RECEIVE_RUN: (ReceiveRunRequest, ReceiveRunAnswer),
    SYNC_MARKER: (SyncMarkerRequest, Empty),
    WRITE_FILE: (WriteFileRequest, Empty),
    LINK_PROGRAM: (LinkProgramRequest, Empty),
    WANDB_SYNC: (WandbSyncRequest, WandbSyncAnswer),
    GPU_REPORT: (GpuReportRequest, GpuReportAnswer),
    DOCTOR: (DoctorRequest, DoctorResult),
    DOCTOR_HISTORY: (DoctorHistoryRequest, DoctorHistoryAnswer),
    SAMPLES: (SamplesRequest, SamplesAnswer),
    READ: (ReadRequest, None),
    READ_RUN: (ReadRunRequest, ReadRunHead),
    FOLLOW: (FollowRequest, None),
    PULL: (PullRequest, PullManifest),
}
