"""Host bytes made safe for the laptop's terminal: the one place pippa decides what may reach it.

A host's output (a run's log, a command, a reason, a name) is text a compromised host or any program
whose output reaches a log controls. Written to a terminal unfiltered, escape sequences act there:
OSC 52 writes the clipboard, OSC 0 the window title, CSI sequences clear or redraw the screen, and
others query the terminal (its answer lands in the input) or switch character sets. ``TerminalText``
keeps printable text, newline, tab and SGR colour (``ESC [ ... m``) and drops every other control
sequence and control character (C0, DEL, C1), including ones split across chunks of a stream; a lone
carriage return (a progress bar redrawing its line) becomes a newline; Unicode's bidirectional controls
(which reorder what the screen shows) are dropped too. ``escape`` is for one-line strings in tables and
notices (and, keeping newlines, for samples): control and format characters become visible
``\\x1b``/``\\u202e``-style escapes. This is the one rule: the samples view uses it too.

Stdlib only, python3 >= 3.8 (shared by the laptop and the host agent).
"""

from __future__ import annotations

import codecs
import re
import unicodedata

# ECMA-48: CSI = ESC [ params intermediates final; OSC = ESC ] ... (BEL | ST); DCS/SOS/PM/APC =
# ESC P/X/^/_ ... ST; any other escape = ESC intermediates final. ST is ESC \.
_SEQ = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]"  # two-char and nF escapes (ESC c, ESC ( B, ESC 7, ...)
)
_SGR = re.compile(r"\x1b\[[0-9;:]*m\Z")
# an escape sequence not finished yet at the end of a chunk (held for the next one)
_OPEN = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)?\Z")
# Characters that reorder or hide what a terminal shows (Unicode's bidirectional controls, as in "Trojan
# Source", CVE-2021-42574, and the line and paragraph separators): dropped from streams like C0/C1.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_CONTROLS = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")  # all but \t and \n (\r handled first)
# What ``escape`` shows as an escape: controls, format characters (bidi controls, zero-width ones),
# surrogates, private use, line and paragraph separators (Unicode general categories).
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Zl", "Zp"))
MAX_HELD = 4096  # an unfinished sequence longer than this is dropped, not held without end


def _clean(text: str, keep_sgr: bool) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out, at = [], 0
    for m in _SEQ.finditer(text):
        out.append(_CONTROLS.sub("", text[at : m.start()]))
        if keep_sgr and _SGR.match(m.group(0)):
            out.append(m.group(0))
        at = m.end()
    out.append(_CONTROLS.sub("", text[at:]))
    return "".join(out)


class TerminalText:
    """A stream of host bytes as text safe to write to a terminal (one per stream: it holds an
    unfinished escape sequence or UTF-8 character across chunks)."""

    def __init__(self, keep_sgr: bool = True) -> None:
        self.keep_sgr = keep_sgr
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""

    def feed(self, chunk: bytes) -> str:
        text = self._held + self._decoder.decode(chunk)
        self._held = ""
        if text.endswith("\r"):  # maybe the first half of \r\n
            self._held, text = "\r", text[:-1]
        m = _OPEN.search(text)
        if m is not None and len(text) - m.start() <= MAX_HELD:
            self._held, text = text[m.start() :] + self._held, text[: m.start()]
        return _clean(text, self.keep_sgr)

    def close(self) -> str:
        """What is left at the end of the stream (an unfinished sequence is dropped)."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return _clean(text, self.keep_sgr)


def terminal_text(data: bytes, keep_sgr: bool = True) -> str:
    """``data`` (a whole log) as text safe for a terminal: see ``TerminalText``."""
    t = TerminalText(keep_sgr)
    return t.feed(data) + t.close()


def screen_line(line: bytes) -> str:
    """One log line (no newline) as a pane that draws plain text shows it: its last redraw (what
    follows a progress bar's last \\r) without any escape sequence or colour."""
    return terminal_text(line.rstrip(b"\r").rsplit(b"\r", 1)[-1], keep_sgr=False)


def escape(text: object, keep_newlines: bool = False) -> str:
    """A host-supplied string for one line of a table or notice: control and format characters (newlines,
    escape sequences and bidi overrides included) shown as ``\\n``, ``\\x1b``, ``\\u202e``, ... instead of
    acting on the terminal. ``keep_newlines``: for a block of text (a sample), newlines stay."""
    s = str(text)
    if s.isascii() and not _CONTROLS.search(s) and "\t" not in s and "\n" not in s and "\r" not in s:
        return s
    out = []
    for ch in s:
        plain = (ch == "\n" and keep_newlines) or (ch.isascii() and ch.isprintable())
        if plain or unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)
