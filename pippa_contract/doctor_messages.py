"""The ``doctor`` and ``doctor_history`` verbs' request and answer types (the result's meaning:
pippa_contract.doctor, docs/CONTRACTS.md); ``pippa_contract.messages`` re-exports them into VERB_TYPES."""

from __future__ import annotations

from typing import Any, TypedDict


# -- `pippa doctor` (the result's meaning: pippa_contract.doctor, docs/CONTRACTS.md) --------------------
class Check(TypedDict):
    check: str  # a short name: "xid", "ecc", "pcie", "gemm", ...
    status: str  # ok, warn, fail or skipped
    gpu: int | None  # the GPU index it is about; None: the host
    detail: str  # what is wrong and what to do, one line


class DoctorResult(TypedDict, total=False):
    host: str
    verdict: str  # ok, warn or fail: the worst status
    checks: list[Check]
    measured: dict[str, Any]  # {"gpus": {"<index>": {"uuid", "gemm_tflops", "copy_tbs"}}, "allreduce_gbs"}
    time: float  # unix seconds when the host answered
    quick: bool  # the active checks were skipped (--quick)
    source: str  # "watcher": Xids the host's alert watcher saw during a run (absent: a `pippa doctor`)


class DoctorRequest(TypedDict, total=False):
    host: str  # the name the result carries
    remote_dir: str  # where the history lives and the training code is (the active checks run it)
    python: list[str]  # the host's training python (its torch is checked, it runs the active checks)
    env: dict[str, str]  # the host entry's env: what runs see on top of the login environment
    expected_gpus: int | None  # the host entry's gpus = N
    gpu_named: str  # no gpus = N, but the host is named like a GPU box ("h100"): a missing driver fails
    quick: bool  # passive checks only
    smi_timeout: float  # seconds nvidia-smi may take before its check fails
    shm_dir: str  # where shared memory is mounted (default /dev/shm)
    seconds: float  # per active measurement (default 4)


class DoctorHistoryRequest(TypedDict):
    remote_dir: str
    limit: int


class DoctorHistoryAnswer(TypedDict):
    results: list[DoctorResult]  # newest first
