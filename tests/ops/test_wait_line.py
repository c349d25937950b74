"""`pippa wait`'s live line on a terminal and its notes (a reconnect): a note gets a line of its own
instead of running into the live line, which the next poll draws again below it."""

from __future__ import annotations

import io

from pippa_ops.cli.wait_status import StatusLine
from pippa_ops.runs.records.listing import RunRecord


def test_a_note_while_waiting_is_a_line_of_its_own() -> None:
    rec = RunRecord(
        host="h100-a",
        run_id="20261126-120000-tiny-ab12",
        session="s",
        recipe="tiny",
        command="x",
        state="running",
        last_step=12,
    )
    out = io.StringIO()
    line = StatusLine({"ab12": rec}, out)
    line._draw()  # what the poll thread draws
    drawn = out.getvalue()
    assert drawn.startswith("\r\x1b[K") and "\n" not in drawn
    line.note("h100-a: connection dropped; reconnecting in 1s")
    said = out.getvalue()[len(drawn) :]
    # the live line cleared first, the note on its own line
    assert said == "\r\x1b[Kpippa: h100-a: connection dropped; reconnecting in 1s\n"
