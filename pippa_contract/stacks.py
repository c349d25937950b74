"""Who a hang is waiting for: the suspect named from the Python stacks of a stalled run's ranks.

The supervisor dumps every process of a stalled attempt with py-spy (``pippa_agent.forensics``); this
pure function reads those stacks. In a collective hang every rank but one sits inside the collective
(``torch.distributed``, DDP's reducer, accelerate's gather) waiting for the one that never arrived: that
rank, the one whose stack is not in the collective, is the suspect. When every rank sits in the same
place (all inside one collective: a network or NCCL problem; all in the same Python frame: a deadlock)
the frame they share is named instead. ``pippa why`` shows the answer; attempts.json keeps it.

Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

# Frames that mean "waiting in a collective": the c10d API, DDP, and accelerate's wrappers around it.
_COLLECTIVE_FILES = (
    "torch/distributed/",
    "torch/nn/parallel/distributed.py",
    "accelerate/utils/operations.py",
    "deepspeed/comm/",
)
_COLLECTIVE_NAMES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "gather_object",
        "scatter",
        "reduce",
        "send",
        "recv",
        "wait",
        "_sync_buffers",
        "_sync_params_and_buffers",
        "wait_for_everyone",
    }
)


@dataclass(frozen=True)
class Frame:
    name: str
    file: str
    line: int

    def text(self) -> str:
        return f"{self.name} ({short_file(self.file)}:{self.line})"


@dataclass(frozen=True)
class ProcessStack:
    """One process's main-thread stack, innermost frame first, with its rank (None: not a rank, e.g.
    the launcher)."""

    pid: int
    rank: int | None
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class Suspect:
    """``kind``: ``rank`` (that rank is not where the others are), ``frame`` (every rank sits in
    ``frame``), or ``none`` (no stacks to read)."""

    kind: str
    text: str
    rank: int | None = None
    frame: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "text": self.text, "rank": self.rank, "frame": self.frame}


def short_file(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else path


def in_collective(frames: Sequence[Frame]) -> bool:
    """Whether a stack waits in a collective (any frame in c10d, DDP or accelerate's gather, or a
    function named like a collective)."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if any(c in path for c in _COLLECTIVE_FILES) or f.name in _COLLECTIVE_NAMES:
            return True
    return False


def from_py_spy(pid: int, rank: int | None, dump: object) -> ProcessStack:
    """A ProcessStack from ``py-spy dump --json``'s list of threads (the main thread's frames; py-spy
    lists the innermost frame first)."""
    threads = [t for t in dump if isinstance(t, dict)] if isinstance(dump, list) else []
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else None)
    frames = []
    for fr in (main or {}).get("frames") or []:
        if isinstance(fr, dict):
            frames.append(
                Frame(str(fr.get("name") or "?"), str(fr.get("filename") or "?"), int(fr.get("line") or 0))
            )
    return ProcessStack(pid, rank, tuple(frames))


def name_suspect(stacks: Sequence[ProcessStack]) -> Suspect:
    """The suspect of a hang (see the module's docstring)."""
    ranks = sorted((s for s in stacks if s.rank is not None and s.frames), key=lambda s: s.rank or 0)
    if not ranks:
        alone = [s for s in stacks if s.frames]
        if not alone:
            return Suspect("none", "no Python stack could be read")
        top = alone[-1].frames[0].text()
        return Suspect("frame", f"stuck in {top}", frame=top)
    waiting = [s for s in ranks if in_collective(s.frames)]
    outside = [s for s in ranks if not in_collective(s.frames)]
    if waiting and outside and len(outside) <= len(waiting):
        odd = outside[0]
        where = odd.frames[0].text()
        others = "the other ranks wait" if len(waiting) > 1 else f"rank {waiting[0].rank} waits"
        return Suspect(
            "rank",
            f"rank {odd.rank} is not in the collective ({others} in "
            f"{_collective_frame(waiting[0].frames)}); it is in {where}",
            rank=odd.rank,
            frame=where,
        )
    tops = Counter(s.frames[0].text() for s in ranks)
    common, count = tops.most_common(1)[0]
    if count == len(ranks):
        where = _collective_frame(ranks[0].frames) if waiting else common
        what = "every rank waits in" if waiting else "every rank sits in"
        return Suspect("frame", f"{what} {where}", frame=where)
    if len(ranks) > 2 and count > len(ranks) // 2:
        odd = next(s for s in ranks if s.frames[0].text() != common)
        where = odd.frames[0].text()
        return Suspect(
            "rank", f"rank {odd.rank} is in {where}; the others in {common}", rank=odd.rank, frame=where
        )
    return Suspect(
        "frame",
        "the ranks are in different places: "
        + "; ".join(f"rank {s.rank} in {s.frames[0].text()}" for s in ranks),
        frame=None,
    )


def _collective_frame(frames: Sequence[Frame]) -> str:
    """The collective a stack waits in: its innermost frame named like a collective (``all_gather
    (torch/distributed/distributed_c10d.py:3012)``), else its innermost frame in the collective files."""
    named = next((f for f in frames if f.name in _COLLECTIVE_NAMES), None)
    if named is not None:
        return named.text()
    inside = next((f for f in frames if any(c in f.file.replace("\\", "/") for c in _COLLECTIVE_FILES)), None)
    return (inside or frames[0]).text()


def stuck_frames(stack: ProcessStack, limit: int = 8) -> list[str]:
    """The innermost frames of a stack as text, for ``pippa why``."""
    return [f.text() for f in stack.frames[:limit]]
