"""Redaction that outlives a secret's rotation: the host remembers a salted fingerprint of every secret
pippa pushed (never the value), and every line or log pippa shows is scanned for text that matches one.

A hash of a value alone cannot be found in text (where would the value start?), so a fingerprint also
keeps the value's length and its character class: ``w`` (letters, digits, ``_``, ``-``: most API
tokens), ``b`` (``w`` plus ``.~+/=%:@``: base64, URL parts) or ``s`` (any non-space byte). To scan a
text, every maximal run of a class's characters at least as long as a print of that class is cut into
its windows of that length, and each window's salted sha256 is compared with the prints. A secret's
every occurrence lies inside such a run (all its characters are in its class), so the scan finds it
wherever it sits, glued to other characters or not; text that is not a secret matches only by a hash
collision. A value with spaces is remembered as its words; pieces shorter than ``MIN_PRINT`` are not
remembered (a current value is still taken out while it is configured: ``secrets.redact_secrets``).

The work is on bytes read as latin-1 (one character per byte), so a log's masked bytes keep their
offsets: a log stream replaces a match with as many ``*`` (``mask``), a reason line with ``***``.
The salt is random per host; the file is 0600 beside the secrets file. A stolen prints file lets
one test guesses of a weak secret, no more than a stolen log line already would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets as _random

from pippa_contract.secrets import TARGET, load_secrets, read_secret_values, redact_secrets

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PRINTS_PATH = "~/.config/pippa/secret_prints.json"
# Tokens a job may hold in its environment without a pippa secrets file (a run started by hand).
JOB_SECRET_ENV = (
    "WANDB_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)
MIN_PRINT = 8  # shorter pieces are no secret worth a print (and would match common words)
CLASSES = {  # the narrowest that holds a piece is its class
    "w": "A-Za-z0-9_\\-",
    "b": "A-Za-z0-9_\\-.~+/=%:@",
    "s": "^\\s",
}
_RUNS = {name: re.compile(f"[{chars}]+", re.ASCII) for name, chars in CLASSES.items()}
_URL_PART = re.compile(r"[^A-Za-z0-9_.~%+-]+")

# (class, length, sha256 hex of salt + piece)
Print = tuple[str, int, str]


def pieces(key: str, value: str) -> list[str]:
    """What of ``value`` is remembered: its words, and for PIPPA_NOTIFY its URLs' parts too."""
    words = value.split()
    if key == TARGET:
        words += [p for w in re.split(r"[\s,]+", value) for p in _URL_PART.split(w)]
    return sorted({w for w in words if len(w.encode()) >= MIN_PRINT})


def _class(piece: str) -> str:
    return next(n for n, rx in _RUNS.items() if rx.fullmatch(piece.encode().decode("latin-1")))


def fingerprint(piece: str, salt: str) -> Print:
    data = piece.encode()
    return (_class(piece), len(data), hashlib.sha256(salt.encode() + data).hexdigest())


class Prints:
    """The remembered fingerprints and their salt (``load`` / ``remember``)."""

    def __init__(self, salt: str, prints: set[Print]) -> None:
        self.salt, self.prints = salt, prints
        self._by: dict[str, dict[int, set[str]]] = {}
        for cls, n, digest in prints:
            self._by.setdefault(cls, {}).setdefault(n, set()).add(digest)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where in ``text`` (bytes as latin-1) a remembered secret is."""
        salt = self.salt.encode()
        found = []
        for cls, lengths in self._by.items():
            shortest = min(lengths)
            for m in _RUNS[cls].finditer(text):
                run = m.group(0)
                if len(run) < shortest:
                    continue
                for n, digests in lengths.items():
                    for i in range(len(run) - n + 1):
                        window = run[i : i + n].encode("latin-1")
                        if hashlib.sha256(salt + window).hexdigest() in digests:
                            found.append((m.start() + i, m.start() + i + n))
        return found


def load(path: str = PRINTS_PATH) -> Prints:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            doc = json.load(f)
        prints = {(str(c), int(n), str(d)) for c, n, d in doc["prints"]}
        return Prints(str(doc["salt"]), prints)
    except (OSError, ValueError, KeyError, TypeError):
        return Prints("", set())


def remember(values: dict[str, str], path: str = PRINTS_PATH) -> None:
    """Add the prints of ``values`` to the host's file (created 0600 with a new salt); never removes one."""
    old = load(path)
    salt = old.salt or _random.token_hex(16)
    prints = old.prints | {fingerprint(p, salt) for k, v in values.items() for p in pieces(k, v)}
    if prints == old.prints and old.salt:
        return
    full = os.path.expanduser(path)
    os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
    tmp = f"{full}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"salt": salt, "prints": sorted(prints)}, f)
    os.replace(tmp, full)


class Redactor:
    """The host's secrets now (values) and before (prints): ``line`` for reason lines, alerts and
    samples (``***``), ``mask`` for log bytes (the same length, so offsets hold)."""

    def __init__(self, values: dict[str, str], prints: Prints) -> None:
        self.values, self.prints = values, prints

    @property
    def empty(self) -> bool:
        return not self.values and not self.prints.prints

    def line(self, text: str) -> str:
        if self.empty:
            return text
        text = redact_secrets(text, self.values)
        raw = text.encode("utf-8", "surrogateescape").decode("latin-1")
        spans = self.prints.spans(raw)
        if not spans:
            return text
        return _cut(raw, spans, lambda n: "***").encode("latin-1").decode("utf-8", "surrogateescape")

    def mask(self, data: bytes) -> bytes:
        if self.empty:
            return data
        raw = data.decode("latin-1")
        spans = self.prints.spans(raw)
        for value in self.values.values():  # a value now configured but pushed before prints were kept
            v = value.encode().decode("latin-1")
            if len(v.strip()) >= 4:
                spans += [(m.start(), m.end()) for m in re.finditer(re.escape(v), raw)]
        return _cut(raw, spans, lambda n: "*" * n).encode("latin-1") if spans else data


def _cut(text: str, spans: list[tuple[int, int]], fill: Any) -> str:
    out, at = [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        start = max(start, at)
        out += [text[at:start], fill(end - start)]
        at = end
    return "".join([*out, text[at:]])


def host_redactor(env_keys: tuple[str, ...] = ()) -> Redactor:
    """The host's redactor: its secrets file now, the prints of what was ever pushed to it, and the
    ``env_keys`` set in this process's environment (a job's own tokens)."""
    return Redactor(read_secret_values(env_keys=env_keys), load())


class StreamMasker:
    """``mask`` over a stream of chunks: a line is masked whole (a secret never spans lines), so the
    part after the last line end waits for the next chunk (at most ``HOLD`` bytes, then it goes)."""

    HOLD = 1 << 16

    def __init__(self, redactor: Redactor) -> None:
        self.redactor, self._held = redactor, b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0 and len(data) < self.HOLD:
            self._held = data
            return b""
        if cut == 0:
            cut = len(data)
        self._held = data[cut:]
        return self.redactor.mask(data[:cut])

    def close(self) -> bytes:
        held, self._held = self._held, b""
        return self.redactor.mask(held)


def remember_secrets_file() -> None:
    """Before the host's secrets file is replaced: remember the prints of what it holds now."""
    remember(load_secrets())
