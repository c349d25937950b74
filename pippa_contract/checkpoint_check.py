"""Is a checkpoint whole? Its manifest, and the one rule that picks the checkpoint a resume uses.

The trainer writes ``pippa-manifest.json`` into each checkpoint last, after every other file of it:
each file's relative path, size and sha256. It hashes in a thread of its own once the checkpoint is
published (training_core.methods.trainer.Manifests), so the save does not wait for a read of every
byte it wrote; until that thread is done (or when the process was killed first) the checkpoint has
no manifest and is judged as one from before manifests (below). A checkpoint whose files do not
match its manifest is torn (a disk that lost its tail, a copy cut short, a hand that truncated a
file) and is never resumed from.

Checkpoints written before manifests existed (or killed before theirs) have none. They are used
as before, once a check of their structure passes (no hashes to compare): each ``*.safetensors``
file's header parses and its data ends exactly at the file's end, each torch file (``*.pt``,
``*.pth``, ``*.bin``: zip archives) ends with its zip directory, each ``*.json`` parses. That
catches a cut file, the common tear.

``pick`` walks the checkpoints newest first and returns the first whole one, with one line for each
torn one it passed over; a torn one is renamed ``checkpoint-<step>.torn`` so that nothing else
(the supervisor's record, a move, an eval of the newest checkpoint) chooses it later, and nothing is
deleted. Python >= 3.8, standard library only (the host supervisor uses it too)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import zipfile

from pippa_contract import rundir as rd

MANIFEST = "pippa-manifest.json"
# Set by the host supervisor for an attempt: the checkpoint it checked (the trainer does not hash it again).
CHECKED_ENV = "PIPPA_CHECKPOINT_CHECKED"
TORN_SUFFIX = ".torn"
REASON_FILE = "pippa-torn.txt"  # inside a checkpoint set aside: why it was
_CHUNK = 1 << 20


def _files(ckpt: str) -> list[str]:
    """Every regular file under ``ckpt`` but the manifest, as sorted POSIX paths relative to it."""
    out = []
    for top, dirs, names in os.walk(ckpt):
        dirs.sort()
        for name in names:
            rel = os.path.relpath(os.path.join(top, name), ckpt).replace(os.sep, "/")
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK)
            if not block:
                return h.hexdigest()
            h.update(block)


def manifest_of(ckpt: str) -> dict[str, object]:
    files = {}
    for rel in _files(ckpt):
        path = os.path.join(ckpt, rel)
        files[rel] = {"size": os.path.getsize(path), "sha256": sha256_file(path)}
    return {"version": 1, "files": files}


def write_manifest(ckpt: str, inode: int | None = None) -> None:
    """The manifest of ``ckpt``'s files, written last (tmp, rename): a manifest that exists is whole,
    and the files it names were all written before it. No fsync: the trainer's own files are not
    synced either (transformers does not), so a synced manifest would promise nothing more.
    ``inode``: the directory's when its files were listed; a directory replaced meanwhile (the same
    step saved again) gets no manifest from this call."""
    data = json.dumps(manifest_of(ckpt), indent=1, sort_keys=True).encode() + b"\n"
    tmp = os.path.join(ckpt, MANIFEST + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    if inode is not None and os.stat(ckpt).st_ino != inode:
        os.unlink(tmp)
        return
    os.replace(tmp, os.path.join(ckpt, MANIFEST))


def _torn_by_manifest(ckpt: str, doc: object, hashes: bool) -> str | None:
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return f"{MANIFEST} names no files"
    for rel, want in sorted(files.items()):
        path = os.path.join(ckpt, rel)
        if not isinstance(want, dict):
            return f"{MANIFEST} is malformed at {rel}"
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"{rel} is missing"
        if size != want.get("size"):
            return f"{rel} is {size} bytes, the manifest says {want.get('size')}"
        if hashes and sha256_file(path) != want.get("sha256"):
            return f"{rel} does not match its sha256 in the manifest"
    return None


def _safetensors_torn(path: str) -> str | None:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"is {size} bytes, too short for a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"is {size} bytes, its header alone says {8 + n}"
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return "has a header that does not parse"
    ends = [
        int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
    ]
    want = 8 + n + max(ends, default=0)
    return None if size == want else f"is {size} bytes, its header says {want}"


def _structure_torn(ckpt: str) -> str | None:
    """A checkpoint without a manifest: is each file it holds whole, as far as its format tells?"""
    for rel in _files(ckpt):
        path = os.path.join(ckpt, rel)
        why = None
        try:
            if rel.endswith(".safetensors"):
                why = _safetensors_torn(path)
            elif rel.endswith((".pt", ".pth", ".bin")) and not zipfile.is_zipfile(path):
                why = "is not a whole torch file (no zip directory at its end)"
            elif rel.endswith(".json"):
                with open(path, "rb") as f:
                    json.loads(f.read())
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            why = f"cannot be read ({type(e).__name__})"
        if why:
            return f"{rel} {why}"
    return None


def torn(ckpt: str, hashes: bool = True) -> str | None:
    """Why the checkpoint directory ``ckpt`` is not whole, or None when it is; without ``hashes``,
    only the sizes the manifest names are compared (a cut file, without reading it)."""
    path = os.path.join(ckpt, MANIFEST)
    if not os.path.exists(path):
        return _structure_torn(ckpt)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return f"{MANIFEST} does not parse"
    return _torn_by_manifest(ckpt, doc, hashes)


def _set_aside(ckpt_dir: str, name: str, why: str) -> None:
    """``name`` renamed to ``<name>.torn`` with its reason inside (REASON_FILE); another rank may have
    set it aside first, or the directory is read-only: it is still passed over."""
    aside = os.path.join(ckpt_dir, name + TORN_SUFFIX)
    with contextlib.suppress(OSError):
        os.replace(os.path.join(ckpt_dir, name), aside)
        with open(os.path.join(aside, REASON_FILE), "w") as f:
            f.write(why + "\n")


def _set_aside_before(ckpt_dir: str, names: list[str]) -> dict[str, str]:
    """The checkpoints set aside earlier (by the agent's quick check, an earlier attempt): name -> why."""
    found = {}
    for entry in names:
        name = entry[: -len(TORN_SUFFIX)]
        if entry.endswith(TORN_SUFFIX) and rd.checkpoint_step(name) is not None:
            try:
                with open(os.path.join(ckpt_dir, entry, REASON_FILE)) as f:
                    found[name] = f.read().strip() or "torn"
            except OSError:
                found[name] = "torn"
    return found


def pick(
    ckpt_dir: str, trusted: str = "", set_aside: bool = True, hashes: bool = True
) -> tuple[int | None, list[str]]:
    """The step of the newest whole checkpoint in ``ckpt_dir`` (None: none), and one line per torn
    checkpoint newer than it (``checkpoint-7 skipped: model.safetensors is 1024 bytes, the manifest
    says 2048``), found now or set aside before. ``trusted``: a checkpoint name already checked by this
    process's parent (the supervisor), not hashed again. ``set_aside``: rename each torn one found to
    ``<name>.torn``. ``hashes``: False for the sizes alone (the agent's quick answer to ``pippa resume``
    and ``stop``)."""
    try:
        listing = os.listdir(ckpt_dir)
    except OSError:
        return None, []
    torn_ones = _set_aside_before(ckpt_dir, listing)
    chosen = None
    for name in reversed(rd.checkpoint_names(listing)):
        why = None if name == trusted else torn(os.path.join(ckpt_dir, name), hashes)
        if why is None:
            chosen = rd.checkpoint_step(name)
            break
        torn_ones[name] = why
        if set_aside:
            _set_aside(ckpt_dir, name, why)
    newer = [(rd.checkpoint_step(n) or 0, n) for n in torn_ones]
    skipped = [
        f"{n} skipped: {torn_ones[n]}"
        for step, n in sorted(newer, reverse=True)
        if chosen is None or step > chosen
    ]
    return chosen, skipped
