"""A host's log on this machine's stdout: its bytes to a pipe or with ``--raw``, and to a terminal
only text, newlines, tabs and colours (``pippa_contract.termsafe``): the laptop never executes the
host's escape sequences (OSC 52 would write the clipboard, CSI 2J clear the screen)."""

from __future__ import annotations

import sys

from pippa_contract.termsafe import TerminalText


class HostOutput:
    """stdout for one stream of host bytes (``pippa logs``, ``logs -f``, ``run --follow``)."""

    def __init__(self, raw: bool = False) -> None:
        self._text = None if raw or not sys.stdout.isatty() else TerminalText()

    def write(self, chunk: bytes) -> None:
        if self._text is None:
            sys.stdout.buffer.write(chunk)
        else:
            sys.stdout.buffer.write(self._text.feed(chunk).encode("utf-8", "replace"))
        sys.stdout.buffer.flush()

    def close(self) -> None:
        if self._text is not None:
            sys.stdout.buffer.write(self._text.close().encode("utf-8", "replace"))
        sys.stdout.buffer.flush()
