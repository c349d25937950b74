"""Streams: a file's bytes from an offset (``read``), and as it grows until the run is over
(``follow``). A stream verb owns the rest of stdin and stdout: it is the last of its process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pippa_agent.host import host_path, tmux, write_out

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import (
        FollowRequest,
        ListRunsRequest,
        ReadRequest,
        ReadRunHead,
        ReadRunRequest,
    )


def _out(redact: bool | None) -> Callable[[bytes], None]:
    """``write_out``, or (``redact``: a log shown) it through a mask of the host's secrets, now and
    remembered (``pippa_contract.secretprints``); ``out(b"")`` sends what the mask held back."""
    if not redact:
        return write_out
    from pippa_contract.secretprints import StreamMasker, host_redactor

    masker = StreamMasker(host_redactor())

    def out(data: bytes) -> None:
        masked = masker.feed(data) if data else masker.close()
        if masked:
            write_out(masked)

    return out


def read(req: ReadRequest) -> None:
    """The file's bytes after ``offset`` (nothing when it does not exist)."""
    out = _out(req.get("redact"))
    try:
        with open(host_path(req["path"]), "rb") as f:
            f.seek(int(req.get("offset", 0)))
            while True:
                data = f.read(1 << 16)
                out(data)
                if not data:
                    return
    except FileNotFoundError:
        return


def read_run(req: ReadRunRequest) -> None:
    """``list_runs``'s answer as one line, with ``chosen``: the run ``name`` means there (the rule of
    ``pippa_contract.runpick``; no name: the newest run), then that run's output.log (``read``). The
    laptop's ``logs`` in one request instead of a listing and then a read."""
    import json

    from pippa_agent.host import AgentError, runs_dir
    from pippa_agent.runs import list_runs
    from pippa_contract.rundir import OUTPUT_LOG
    from pippa_contract.runpick import choose

    try:
        asked: ListRunsRequest = {"remote_dir": req["remote_dir"]}
        if "limit" in req:
            asked["limit"] = req["limit"]
        listing = list_runs(asked)
        chosen = choose(listing, req.get("name"))
        path = os.path.join(runs_dir(req["remote_dir"]), chosen, OUTPUT_LOG) if chosen else None
    except AgentError as e:
        write_out((json.dumps(e.answer()) + "\n").encode())
        return
    head: ReadRunHead = {**listing, "chosen": chosen}
    write_out((json.dumps(head) + "\n").encode())
    if path is not None:
        read({"path": path, "redact": bool(req.get("redact"))})


def _exit_on_stdin_eof() -> None:
    """The client closed the channel (or the connection went): stop at once."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os._exit(0)


def follow(req: FollowRequest, poll_s: float = 0.1) -> None:
    """Stream the file from ``offset`` as it grows (waiting for it to appear) until the run is over:
    ``end_file`` exists or ``session`` is gone; then one last read, so nothing written before the
    end is missed. Without an end condition it streams until the client goes away."""
    if req.get("watch_stdin", True):
        import threading

        threading.Thread(target=_exit_on_stdin_eof, daemon=True).start()
    path = host_path(req["path"])
    offset = int(req.get("offset", 0))
    end = req.get("end_file")
    end_file = host_path(end) if end else None
    session = req.get("session")
    out = _out(req.get("redact"))
    check_every = max(1, int(float(req.get("check_s", 0.5)) / poll_s))
    f = None
    ticks = 0
    ending = False
    try:
        while True:
            if f is None:
                try:
                    f = open(path, "rb")  # noqa: SIM115 - held open across polls
                    f.seek(offset)
                except FileNotFoundError:
                    f = None
            if f is not None:
                while True:
                    data = f.read(1 << 16)
                    if not data:
                        break
                    out(data)
            if ending:
                out(b"")
                return
            ticks += 1
            if ticks % check_every == 0 and _run_over(end_file, session):
                ending = True  # one more read picks up what was written just before the end
                continue
            time.sleep(poll_s)
    finally:
        if f is not None:
            f.close()


def _run_over(end_file: str | None, session: str | None) -> bool:
    if end_file is not None and os.path.exists(end_file):
        return True
    return session is not None and tmux("has-session", "-t", "=" + session).returncode != 0
