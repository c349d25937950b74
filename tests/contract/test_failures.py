"""The failure classes (pippa_contract.failures), each rule against the exact lines its source prints.

Where each excerpt's format comes from:
- CUDA OOM: c10/cuda/CUDACachingAllocator.cpp, ``TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of
  memory. Tried to allocate ", ..., ". GPU ", device, " has a total capacity of ", ...)`` (torch >= 2.2),
  raised to Python as ``torch.OutOfMemoryError`` (torch >= 2.5; ``torch.cuda.OutOfMemoryError`` before).
- NCCL watchdog: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, ``"[Rank ", rank_, "] ", "Watchdog caught
  collective operation timeout: ", work, " ran for ", ..., " milliseconds before timing out."``, logged
  through glog with torchrun's ``[rankN]:`` prefix; the process then aborts (SIGABRT, exit 134).
- NCCL error: torch/csrc/distributed/c10d/NCCLUtils.hpp, ``C10D_NCCL_CHECK``: ``"NCCL error in: " __FILE__
  ":" __LINE__ ", " + ncclGetErrorWithVersion(result) + "\\n" + getNcclErrorDetailStr(...)`` raised as
  ``DistBackendError`` (the excerpt is vllm-project/vllm#4618's).
- Kernel OOM killer: mm/oom_kill.c, ``dump_oom_victim`` (``oom-kill:constraint=...,task=%s,pid=%d,uid=%d``)
  and ``__oom_kill_process`` (``"%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, ..."`` with
  ``Out of memory`` or ``Memory cgroup out of memory``).
- Xid: NVIDIA's driver, ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
  (docs.nvidia.com/deploy/xid-errors).
- Python tracebacks: CPython's traceback module (``Traceback (most recent call last):``, ``  File "...",
  line N, in f``, then ``Type: message``).
"""

from __future__ import annotations

import pytest

from pippa_contract import advice, retry, stacks, stall
from pippa_contract import failures as fc

ROOT = "/home/ml/proj"
SITE = "/home/ml/proj/.venv/lib/python3.11/site-packages"
CUDA_OOM = f"""\
Traceback (most recent call last):
  File "{ROOT}/training_core/train.py", line 71, in main
    return methods.get(res.config.method).run(res, run_dir.resolve(), resume=args.resume)
  File "{SITE}/torch/nn/modules/linear.py", line 134, in forward
    return F.linear(input, self.weight, self.bias)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.22 GiB. GPU 0 has a total capacity \
of 79.10 GiB of which 959.44 MiB is free. Process 12447 has 78.13 GiB memory in use. Of the allocated memory \
76.01 GiB is allocated by PyTorch, and 472.05 MiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid \
fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""
OLD_CUDA_OOM = """\
RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB \
already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)
"""
NCCL_WATCHDOG = """\
{'loss': 0.12, 'grad_norm': 1.3}
[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation \
timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran \
for 600081 milliseconds before timing out.
[rank0]:[E1218 20:27:21.427415540 ProcessGroupNCCL.cpp:2172] [PG ID 0 PG GUID 0(default_pg) Rank 0] First \
PG on this rank to signal dumping.
terminate called after throwing an instance of 'c10::DistBackendError'
"""
NCCL_ERROR = f"""\
Traceback (most recent call last):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 2501, in all_reduce
    work = group.allreduce([tensor], opts)
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, \
unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
Last error:
"""
KERNEL_MEMCG = [
    "[  510.762654] python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, "
    "oom_score_adj=0",
    "[  510.910332] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/user.slice,task_memcg=/user.slice/session-2.scope,task=python3,pid=2343,uid=0",
    "[  510.917639] Memory cgroup out of memory: Killed process 2343 (python3) total-vm:31763532kB, "
    "anon-rss:13928044kB, file-rss:12208kB, shmem-rss:0kB, UID:0 pgtables:27584kB oom_score_adj:0",
]
KERNEL_GLOBAL = [
    "Out of memory: Killed process 2446 (python) total-vm:5424564kB, anon-rss:255676kB, "
    "file-rss:100240kB, shmem-rss:38948kB, UID:1000 pgtables:1496kB oom_score_adj:0"
]
XID_79 = "[ 9123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus."
XID_48 = "NVRM: Xid (PCI:0000:83:00): 48, pid=4071, name=python, Ch 00000010, DBE (double bit error)"
XID_31 = (
    "NVRM: Xid (PCI:0000:00:06): 31, pid=79749, name=exe, Ch 0000000a, intr 00000000. MMU Fault: "
    "ENGINE GRAPHICS GPC2 GPCCLIENT_T1_7 faulted @ 0x2b57_b3000000. Fault is of type FAULT_PDE "
    "ACCESS_TYPE_VIRT_WRITE"
)
KEY_ERROR = f"""\
step 3: reward/mean=0.25
Traceback (most recent call last):
  File "{ROOT}/training_core/train.py", line 71, in main
    return run()
  File "{ROOT}/data/loaders.py", line 118, in load_row
    return row["answer"]
           ~~~^^^^^^^^^^
KeyError: 'answer'
"""
# accelerate launch under DDP: the rank's traceback (prefixed), then the launcher's own about the child.
RANKED = f"""\
[rank1]: Traceback (most recent call last):
[rank1]:   File "{ROOT}/training_core/rewards/base.py", line 40, in score
[rank1]:     return 1.0 / len(x)
[rank1]: ZeroDivisionError: division by zero
Traceback (most recent call last):
  File "{SITE}/accelerate/commands/launch.py", line 1200, in launch_command
    simple_launcher(args)
subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.
"""


def facts(code: int | None, log: str = "", **kw: object) -> fc.AttemptFacts:
    return fc.AttemptFacts(exit_code=code, log_tail=log.splitlines(), root=ROOT, **kw)  # type: ignore[arg-type]


def test_a_cuda_oom_traceback_is_oom_in_both_torch_formats() -> None:
    v = fc.classify(facts(1, CUDA_OOM))
    assert v.cls == "oom" and v.reason.startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.22"
    )
    assert fc.classify(facts(1, OLD_CUDA_OOM)).cls == "oom"


def test_the_error_line_wins_over_the_source_line_a_traceback_quotes() -> None:
    # what training_core.run.testhooks prints: the raise statement is quoted above the error itself
    error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    log = (
        "Traceback (most recent call last):\n"
        '  File "/p/training_core/run/testhooks.py", line 49, in on_step_begin\n'
        f"    raise torch.OutOfMemoryError(\n{error}\n"
    )
    assert fc.classify(facts(1, log)).reason == error


def test_the_nccl_watchdog_and_an_nccl_error_are_nccl() -> None:
    v = fc.classify(facts(134, NCCL_WATCHDOG))
    assert v.cls == "nccl" and v.reason.startswith("[Rank 0] Watchdog caught collective operation timeout")
    e = fc.classify(facts(1, NCCL_ERROR))
    assert e.cls == "nccl" and "unhandled system error" in e.reason


def test_sigkill_with_the_kernel_naming_the_trainer_is_host_oom() -> None:
    v = fc.classify(facts(137, "step 3\n", kernel_lines=KERNEL_MEMCG, pids=[2343]))
    assert v.cls == "host-oom" and "2343" in v.reason and len(v.lines) == 2
    assert fc.classify(facts(137, "", kernel_lines=KERNEL_GLOBAL)).cls == "host-oom"
    # another process's kill is not ours; a cgroup's counter is evidence on its own
    assert fc.classify(facts(137, "", kernel_lines=KERNEL_MEMCG, pids=[99])).cls == "crash"
    assert fc.classify(facts(137, "", cgroup_oom_kills=1)).cls == "host-oom"
    # the kernel's lines without a SIGKILL exit are not this attempt's end
    assert fc.classify(facts(1, KEY_ERROR, kernel_lines=KERNEL_MEMCG, pids=[2343])).cls == "crash"


def test_a_hardware_xid_is_a_gpu_fault_naming_the_gpu_but_a_program_xid_is_not() -> None:
    v = fc.classify(facts(134, "CUDA error: unspecified launch failure\n", kernel_lines=[XID_79]))
    assert (v.cls, v.gpu, v.reason) == ("gpu-fault", "PCI:0000:3b:00", "Xid 79 on GPU PCI:0000:3b:00")
    assert fc.classify(facts(1, "", kernel_lines=[XID_48])).cls == "gpu-fault"
    assert fc.classify(facts(1, KEY_ERROR, kernel_lines=[XID_31])).cls == "crash"
    ecc = fc.classify(facts(1, "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"))
    assert ecc.cls == "gpu-fault"


def test_a_traceback_is_a_crash_with_its_type_message_and_last_frame() -> None:
    v = fc.classify(facts(1, KEY_ERROR))
    assert fc.label(v.cls, v.reason) == "crash: KeyError 'answer' at data/loaders.py:118"
    assert v.lines[-1] == "KeyError: 'answer'"


def test_a_ranks_traceback_wins_over_the_launchers_report_about_it() -> None:
    v = fc.classify(facts(1, RANKED))
    assert v.reason == "ZeroDivisionError division by zero at training_core/rewards/base.py:40"


@pytest.mark.parametrize(
    "log",
    [
        "",
        "\x00\x01 garbage \ufffd\n",
        "some output\nlast words here\n",
        'Traceback (most recent call last):\n  File "x.py", line 1, in <m>\n',
    ],
)
def test_a_log_never_seen_is_a_crash_with_its_last_line(log: str) -> None:
    v = fc.classify(facts(1, log))
    assert v.cls == "crash"
    last = [ln.strip() for ln in log.splitlines() if ln.strip()]
    assert v.reason == (last[-1] if last else "exit 1")


def test_the_ordering_rules() -> None:
    assert fc.classify(facts(0, CUDA_OOM)).cls == "completed"
    assert fc.classify(facts(130, CUDA_OOM, stopped=True)).cls == "stopped"
    # the stop came during the last step: the trainer saved it and completed, which is what it was
    assert fc.classify(facts(0, "", stopped=True)).cls == "completed"
    assert fc.classify(facts(None, CUDA_OOM)).cls == "lost"
    assert fc.classify(facts(130, "", stalled_reason="no new metrics line for 15m")).reason.endswith("15m")
    assert fc.classify(facts(2, "error: unknown recipe 'x'\n")).reason == "error: unknown recipe 'x'"
    assert (
        fc.classify(facts(1, "x\n", diverged_error="diverged at step 3: loss/total is nan")).cls == "diverged"
    )
    assert fc.classify(facts(137, "step 9\n")).reason == "killed by SIGKILL (last line: step 9)"
    assert fc.label("stalled", "no new metrics line for 15m") == "stalled (no new metrics line for 15m)"


# --- the stall threshold --------------------------------------------------------------------------


def test_the_stall_threshold_follows_the_runs_own_step_times() -> None:
    assert stall.threshold([], None, 300.0) is None  # nothing before the first step
    assert stall.threshold([100.0], None, 300.0) == 300.0
    few = [0.0, 10.0, 20.0, 100.0]  # fewer than 10 intervals: the longest one
    assert stall.threshold(few, None, 300.0) == 400.0
    steady = [i * 120.0 for i in range(12)] + [12 * 120.0 + 2000.0]  # 11 x 2 min, one slow eval
    assert stall.threshold(steady, None, 300.0) == 600.0  # 5 x the median, not the outlier
    assert stall.threshold([i * 1.0 for i in range(20)], None, 300.0) == 300.0  # the floor
    assert stall.threshold(steady, 60.0, 300.0) == 60.0 and stall.threshold(steady, "off", 300.0) is None


def test_the_floor_is_lowered_only_by_a_positive_env_value() -> None:
    assert stall.floor_s({}) == 300.0 and stall.floor_s({"PIPPA_STALL_FLOOR_S": "5"}) == 5.0
    assert (
        stall.floor_s({"PIPPA_STALL_FLOOR_S": "-1"}) == 300.0
        and stall.floor_s({"PIPPA_STALL_FLOOR_S": "x"}) == 300.0
    )
    assert stall.reason(900, True) == "no new metrics line for 15m" and stall.describe(90) == "90s"


# --- retry by class -------------------------------------------------------------------------------


def test_infrastructure_failures_do_not_spend_the_budget() -> None:
    d = retry.decide(["lost"], max_attempts=1)
    assert d.retry and d.spends == "infra"
    assert retry.decide(["stalled", "nccl", "lost"], max_attempts=1).retry
    assert not retry.decide(["stalled", "nccl", "lost", "stalled"], max_attempts=1).retry
    assert retry.decide(["lost", "crash"], max_attempts=2).spends == "budget"
    assert not retry.decide(["lost", "crash", "crash"], max_attempts=2).retry


def test_oom_halves_the_batch_keeping_the_effective_batch_down_to_one() -> None:
    d = retry.decide(["oom"], max_attempts=1, batch=(8, 1))
    assert d.retry and d.batch == (4, 2) and d.set_args()[-1] == "train.gradient_accumulation_steps=2"
    assert retry.halve(9, 1) == (3, 3) and retry.halve(1, 8) is None
    assert not retry.decide(["oom"], max_attempts=5, batch=(1, 8)).retry
    assert retry.decide(["oom"], max_attempts=2, on_oom="fail", batch=(8, 1)).spends == "budget"
    assert not retry.decide(["oom"], max_attempts=1, on_oom="fail", batch=(8, 1)).retry


@pytest.mark.parametrize("cls", ["config", "stopped", "diverged", "gpu-fault", "completed", "disk-full"])
def test_classes_never_retried(cls: str) -> None:
    assert not retry.decide([cls], max_attempts=9).retry


def test_a_full_disk_is_disk_full_naming_the_path_and_the_free_space() -> None:
    # the trainer's own line (training_core.run.lifecycle), under a traceback a writer printed before it
    ours = "disk full: writing /data/runs/r/metrics.jsonl: No space left on device (0 B free on /data)"
    tb = [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in save',
        "OSError: [Errno 28] No space left on device",
        ours,
    ]
    v = fc.classify(fc.AttemptFacts(exit_code=1, log_tail=tb))
    assert (v.cls, v.reason) == ("disk-full", ours[len("disk full: ") :])
    assert fc.label(v.cls, v.reason).startswith("disk-full (writing /data/runs/r/metrics.jsonl: ")
    # torch's writer says neither: the supervisor saw the file system full when the attempt ended
    torch_says = ["RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter failed"]
    v = fc.classify(fc.AttemptFacts(exit_code=1, log_tail=torch_says, disk_full="12 KB free on /data"))
    assert (v.cls, v.reason) == ("disk-full", "no space left on the run directory (12 KB free on /data)")
    quota = ["OSError: [Errno 122] Disk quota exceeded: '/home/u/runs/r/checkpoints/x'"]
    assert fc.classify(fc.AttemptFacts(exit_code=1, log_tail=quota)).cls == "disk-full"
    assert fc.classify(fc.AttemptFacts(exit_code=0, log_tail=tb)).cls == "completed"
    assert fc.classify(fc.AttemptFacts(exit_code=130, log_tail=tb, stopped=True)).cls == "stopped"
    assert "disk-full" in fc.CLASSES and "disk-full" in fc.FINAL


def test_the_advice_for_a_full_disk_names_what_to_free_and_the_resume() -> None:
    ours = "writing /data/runs/r/metrics.jsonl: No space left on device (0 B free on /data)"
    assert advice.after_disk_full(ours, "r1", "h1") == (
        "free space on h1 (0 B free on /data; it was writing /data/runs/r/metrics.jsonl): ended runs "
        "(pippa prune --older-than 7d --host h1, pippa rm RUN), fewer checkpoints (checkpoint.keep); "
        "then pippa resume r1 --host h1"
    )
    quota = "OSError: [Errno 122] Disk quota exceeded: '/home/u/runs/r/x' (free space unknown on /home)"
    said = advice.after_disk_full(quota, "r1", "h1")
    assert said.startswith(
        "free space on h1 (free space unknown on /home; it was writing /home/u/runs/r/x): "
    )
    seen = advice.after_disk_full("no space left on the run directory (12 KB free on /data)", "r1", "h1")
    assert seen.startswith("free space on h1 (12 KB free on /data): ended runs")
    bare = advice.after_disk_full(None, "r1", "h1")
    assert bare.startswith("free space on h1 (the run directory's disk on h1): ")
    assert bare.endswith("; then pippa resume r1 --host h1") and "pippa run" not in bare


# --- the suspect of a hang ------------------------------------------------------------------------

C10D = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _stack(rank: int | None, *frames: tuple[str, str, int]) -> stacks.ProcessStack:
    return stacks.ProcessStack(100 + (rank or 0), rank, tuple(stacks.Frame(*f) for f in frames))


def test_the_rank_outside_the_collective_is_the_suspect() -> None:
    waiting = [
        ("all_gather", C10D, 3012),
        ("gather", "/v/site-packages/accelerate/utils/operations.py", 380),
        ("_generate", "/v/site-packages/trl/trainer/grpo_trainer.py", 1500),
    ]
    odd = [("_hang", f"{ROOT}/training_core/run/testhooks.py", 30), ("on_step_begin", "/v/x.py", 3)]
    s = stacks.name_suspect(
        [_stack(None, ("main", "/v/accelerate/launch.py", 1)), _stack(0, *waiting), _stack(1, *odd)]
    )
    assert (s.kind, s.rank) == ("rank", 1)
    assert "testhooks.py:30" in s.text and "all_gather" in s.text
    eight = [_stack(r, *waiting) for r in range(8) if r != 5] + [_stack(5, *odd)]
    assert stacks.name_suspect(eight).rank == 5


def test_every_rank_in_one_place_names_the_frame() -> None:
    waiting = [("all_reduce", C10D, 2501), ("step", f"{ROOT}/train.py", 9)]
    s = stacks.name_suspect([_stack(0, *waiting), _stack(1, *waiting)])
    assert s.kind == "frame" and s.frame == "all_reduce (torch/distributed/distributed_c10d.py:2501)"
    dead = [("acquire", f"{ROOT}/lock.py", 5)]
    assert (
        stacks.name_suspect([_stack(0, *dead), _stack(1, *dead)]).text
        == "every rank sits in acquire (proj/lock.py:5)"
    )
    assert stacks.name_suspect([]).kind == "none"


def test_a_py_spy_dump_reads_the_main_thread() -> None:
    dump = [
        {"thread_name": "pt_autograd_0", "frames": [{"name": "x", "filename": "a.py", "line": 1}]},
        {"thread_name": "MainThread", "frames": [{"name": "sleep_loop", "filename": "/p/h.py", "line": 7}]},
    ]
    st = stacks.from_py_spy(42, 1, dump)
    assert st.frames[0] == stacks.Frame("sleep_loop", "/p/h.py", 7) and st.rank == 1
