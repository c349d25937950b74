"""The agent's loop: framed JSON requests on stdin (``<n>\\n`` + n bytes), one JSON answer line
each (``{"error": kind, "message"}`` for an expected failure), until stdin ends; a stream verb is
the last of its process. ``VERBS`` is the one table it dispatches from; each verb's module is
imported when a request names it."""

from __future__ import annotations

import importlib
import json
import os

from pippa_agent.host import AgentError, write_out
from pippa_contract import wire as v

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

JSON, STREAM = "json", "stream"  # a JSON verb answers one line; a stream verb writes its own output
# verb -> (module of pippa_agent, handler, JSON or STREAM). Each handler takes the verb's request type
# and returns its answer type (pippa_contract.messages.VERB_TYPES; tests/contract/test_verbs.py checks
# every row). The handlers are imported by name on first use, so a request pays only for its own
# module; the TYPE_CHECKING block below imports each one for a reader, an IDE and mypy.
VERBS = {
    v.PROBE: ("probe", "probe", JSON),
    v.INSTALL_BWRAP: ("probe", "install_bwrap", JSON),
    v.INSTALL_UV: ("probe", "install_uv", JSON),
    v.CHECK_PYTHON: ("probe", "check_python", JSON),
    v.LIST_RUNS: ("runs", "list_runs", JSON),
    v.LAUNCH: ("runs", "launch", JSON),
    v.STOP: ("runs", "stop", JSON),
    v.RUN_CHECKPOINTS: ("runs", "run_checkpoints", JSON),
    v.REMOVE_RUNS: ("runs", "remove_runs", JSON),
    v.SLURM_SUBMIT: ("slurm", "slurm_submit", JSON),
    v.SLURM_STOP: ("slurm", "slurm_stop", JSON),
    v.SYNC_LIST: ("sync", "sync_list", JSON),
    v.SYNC_APPLY: ("sync", "sync_apply", JSON),  # reads the tar that follows its request first
    v.SYNC_MARKER: ("sync", "sync_marker", JSON),
    v.WRITE_FILE: ("sync", "write_file", JSON),
    v.WANDB_SYNC: ("wandb_sync", "wandb_sync", JSON),
    v.GPU_REPORT: ("gpus", "gpu_report", JSON),
    v.RECEIVE_RUN: ("receive", "receive_run", JSON),  # reads the run's files that follow its request first
    v.LINK_PROGRAM: ("pins", "link_program", JSON),
    v.DOCTOR: ("doctor.run", "doctor", JSON),
    v.DOCTOR_HISTORY: ("doctor.run", "doctor_history", JSON),
    v.SAMPLES: ("samples", "samples", JSON),
    v.READ: ("streams", "read", STREAM),
    v.READ_RUN: ("streams", "read_run", STREAM),
    v.FOLLOW: ("streams", "follow", STREAM),
    v.PULL: ("pull", "pull", STREAM),
}
if TYPE_CHECKING:
    from pippa_agent.doctor.run import doctor, doctor_history
    from pippa_agent.gpus import gpu_report
    from pippa_agent.pins import link_program
    from pippa_agent.probe import check_python, install_bwrap, install_uv, probe
    from pippa_agent.pull import pull
    from pippa_agent.receive import receive_run
    from pippa_agent.runs import launch, list_runs, remove_runs, run_checkpoints, stop
    from pippa_agent.samples import samples
    from pippa_agent.slurm import slurm_stop, slurm_submit
    from pippa_agent.streams import follow, read, read_run
    from pippa_agent.sync import sync_apply, sync_list, sync_marker, write_file
    from pippa_agent.wandb_sync import wandb_sync

    HANDLERS = (
        probe,
        install_bwrap,
        install_uv,
        check_python,
        list_runs,
        launch,
        stop,
        run_checkpoints,
        remove_runs,
        slurm_submit,
        slurm_stop,
        sync_list,
        sync_apply,
        sync_marker,
        write_file,
        wandb_sync,
        gpu_report,
        link_program,
        doctor,
        doctor_history,
        samples,
        read,
        read_run,
        follow,
        pull,
        receive_run,
    )


def handler(verb: str) -> Callable[[dict[str, Any]], Any]:
    """The verb's handler, its module imported now (a request the agent has no row for: exit)."""
    if verb not in VERBS:
        raise SystemExit(f"pippa agent: unknown verb {verb!r}")
    module, name, _kind = VERBS[verb]
    found: Callable[[dict[str, Any]], Any] = getattr(importlib.import_module("pippa_agent." + module), name)
    return found


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


def answer(verb: str, req: dict[str, Any]) -> None:
    """Run one JSON verb and print its answer (or its expected failure) as one line."""
    run = handler(verb)
    try:
        result = run(req)
    except AgentError as e:
        result = e.answer()
    write_out((json.dumps(result) + "\n").encode())


def serve(first: bytes | None) -> None:
    """Answer ``first`` and then each request that follows on stdin, until stdin ends; a stream verb
    owns the rest of stdin and stdout, so it is the last request of its process."""
    request = first
    while request is not None:
        message = json.loads(request)
        verb, args = message["verb"], message.get("args", {})
        if verb in VERBS and VERBS[verb][2] == STREAM:
            handler(verb)(args)
            return
        answer(verb, args)
        request = read_frame()


# What the common verbs import (list_runs and tmux, read, gpu_report), in the order they are worth it.
PREPARE = ("json", "subprocess", "pippa_agent.runs", "pippa_agent.streams", "pippa_agent.gpus")


def prepare() -> None:
    """Import PREPARE while no request is waiting on stdin: idle time of an agent started before its
    command (a keeper's), otherwise little or nothing (a request that is there already goes first)."""
    import select

    for name in PREPARE:
        if select.select([0], [], [], 0)[0]:
            return
        importlib.import_module(name)


def main() -> None:
    """``python3 -m pippa_agent.serve < requests``: the same service without the bootstrap (for debugging)."""
    serve(read_frame())


if __name__ == "__main__":
    main()
