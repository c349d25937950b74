"""Pull: what the laptop lacks of a run directory, in one stream (a manifest line, then framed bytes)."""

from __future__ import annotations

import json
import os

from pippa_agent.host import AgentError, ErrorKind, host_path, write_frame, write_out
from pippa_contract import rundir as rd
from pippa_contract.runfacts import tail_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pippa_contract.messages import PullManifest, PullRequest


PULL_CHUNK = 1 << 20


def run_files(run_dir: str, checkpoint: str | None) -> tuple[list[Any], list[str], str | None]:
    """A run's regular files (symlinks never followed) as ``[rel, size, mtime]``; of ``checkpoints/``
    only the chosen one (``latest``, or a ``checkpoint-N``/``N`` name). Also every checkpoint's name."""
    ckdir = os.path.join(run_dir, rd.CHECKPOINTS)
    try:
        names = rd.checkpoint_names([n for n in os.listdir(ckdir) if os.path.isdir(os.path.join(ckdir, n))])
    except OSError:
        names = []
    chosen = None
    if checkpoint == "latest":
        chosen = names[-1] if names else None
    elif checkpoint:
        want = checkpoint if rd.checkpoint_step(checkpoint) is not None else rd.CHECKPOINT_PREFIX + checkpoint
        if want not in names:
            known = ", ".join(names) or "none"
            raise AgentError(ErrorKind.NOT_FOUND, f"no {want} in {run_dir} (checkpoints: {known})")
        chosen = want
    files: list[Any] = []

    def walk(rel: str) -> None:
        try:
            it = os.scandir(os.path.join(run_dir, rel) if rel else run_dir)
        except OSError:
            return
        with it:
            for e in sorted(it, key=lambda e: e.name):
                name = rel + "/" + e.name if rel else e.name
                if e.is_symlink():
                    continue
                if e.is_dir():
                    if name == rd.CHECKPOINTS:
                        if chosen:
                            walk(rd.CHECKPOINTS + "/" + chosen)
                    else:
                        walk(name)
                elif e.is_file() and not e.name.endswith(".tmp"):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    files.append([name, st.st_size, st.st_mtime])

    walk("")
    return files, names, chosen


def pull(req: PullRequest) -> None:
    """What the laptop lacks of a run directory, in one stream: a JSON manifest line
    (``files``: ``[rel, size, offset, mtime]``, ``checkpoints``, ``chosen``, ``send``), then for each
    file with ``offset < size`` its bytes from ``offset`` as frames (``<n>\\n`` + n bytes) ending in
    ``0\\n``. A file the laptop has (``have``: rel -> [size, tail_digest]) is sent from its end when
    the host's copy still starts with it, else whole. Sizes are those of the listing: a file that
    grows meanwhile is sent up to that size (the next pull gets the rest)."""
    run_dir = host_path(req["run_dir"])
    try:
        if not os.path.isfile(os.path.join(run_dir, rd.RUN_JSON)):
            raise AgentError(ErrorKind.NOT_FOUND, f"no run at {run_dir}")
        files, names, chosen = run_files(run_dir, req.get("checkpoint"))
    except AgentError as e:  # answered like a JSON verb's failure, in place of the manifest
        write_out((json.dumps(e.answer()) + "\n").encode())
        return
    have = req.get("have") or {}
    plan = []
    for rel, size, mt in files:
        offset = 0
        local = have.get(rel)
        if isinstance(local, list) and len(local) == 2 and isinstance(local[0], int) and local[0] <= size:
            offset = local[0] if tail_digest(os.path.join(run_dir, rel), local[0]) == local[1] else 0
        plan.append([rel, size, offset, mt])
    send = sum(size - offset for _, size, offset, _ in plan)
    manifest: PullManifest = {"files": plan, "checkpoints": names, "chosen": chosen, "send": send}
    write_out((json.dumps(manifest) + "\n").encode())
    for rel, size, offset, _ in plan:
        if offset >= size:
            continue
        try:
            with open(os.path.join(run_dir, rel), "rb") as f:
                f.seek(offset)
                left = size - offset
                while left > 0:
                    data = f.read(min(PULL_CHUNK, left))
                    if not data:
                        break  # it shrank (replaced) meanwhile: the laptop sees a short file
                    write_frame(data)
                    left -= len(data)
        except OSError:
            pass
        write_frame(b"")
