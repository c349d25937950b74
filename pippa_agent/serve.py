"""The agent's loop: framed JSON requests on stdin (``<n>\\n`` + n bytes), one JSON answer line
each (``{"error": kind, "message"}`` for an expected failure), until stdin ends; a stream verb is
the last of its process. Each verb's module is imported when a request names it."""

from __future__ import annotations

import importlib
import json
import os

from pippa_agent.host import AgentError, write_out
from pippa_contract import wire as v

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from pippa_agent.host import Req

# verb -> (module of pippa_agent, function)
JSON_VERBS = {
    v.PROBE: ("probe", "probe"),
    v.INSTALL_BWRAP: ("probe", "install_bwrap"),
    v.INSTALL_UV: ("probe", "install_uv"),
    v.CHECK_PYTHON: ("probe", "check_python"),
    v.LIST_RUNS: ("runs", "list_runs"),
    v.LAUNCH: ("runs", "launch"),
    v.STOP: ("runs", "stop"),
    v.RUN_CHECKPOINTS: ("runs", "run_checkpoints"),
    v.REMOVE_RUNS: ("runs", "remove_runs"),
    v.SLURM_SUBMIT: ("slurm", "slurm_submit"),
    v.SLURM_STOP: ("slurm", "slurm_stop"),
    v.SYNC_LIST: ("sync", "sync_list"),
    v.SYNC_APPLY: ("sync", "sync_apply"),
    v.SYNC_MARKER: ("sync", "sync_marker"),
    v.WRITE_FILE: ("sync", "write_file"),
    v.WANDB_SYNC: ("wandb_sync", "wandb_sync"),
    v.GPU_REPORT: ("gpus", "gpu_report"),
    v.RECEIVE_RUN: ("receive", "receive_run"),
}
STREAM_VERBS = {
    v.READ: ("streams", "read"),
    v.READ_RUN: ("streams", "read_run"),
    v.FOLLOW: ("streams", "follow"),
    v.PULL: ("pull", "pull"),
}


def handler(where: tuple[str, str]) -> Callable[..., Any]:
    module, name = where
    return getattr(importlib.import_module("pippa_agent." + module), name)  # type: ignore[no-any-return]


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


def answer(verb: str, req: Req) -> None:
    """Run one JSON verb and print its answer (or its expected failure) as one line."""
    if verb not in JSON_VERBS:
        raise SystemExit(f"pippa agent: unknown verb {verb!r}")
    try:
        result = handler(JSON_VERBS[verb])(req)
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
        if verb in STREAM_VERBS:
            handler(STREAM_VERBS[verb])(args)
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
