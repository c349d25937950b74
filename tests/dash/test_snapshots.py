"""Layout snapshots of the main screen at the sizes people use (80x24, 120x40 and 160x48).

Deterministic state only (no clock, no network): a host up with two GPUs and three runs, a host
down with its retry countdown, ``local`` without GPU, and a selected run with curves and a W&B link.
Update with ``pytest tests/dash --snapshot-update`` after checking the SVGs by eye.
"""

from __future__ import annotations

import dash_state as S

from pippa_ops.dash import create_app


def _app():
    return create_app(S.HOSTS, states=S.states(), detail=S.detail())


def test_main_layout_80x24(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(80, 24))


def test_main_layout_120x40(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(120, 40))


def test_main_layout_160x48(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(160, 48))


def test_help_160x48(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(160, 48), press=["question_mark"])


def _eight_long():
    return create_app(S.EIGHT_HOSTS, states=S.eight_long_states(), detail=S.eight_detail())


def test_8_gpus_and_a_long_state_80x24(snap_compare) -> None:
    """Issue 32: no glyph outside a border, every chart titled, no cell cut mid-number."""
    assert snap_compare(_eight_long(), terminal_size=(80, 24))


def test_8_gpus_and_a_long_state_120x40(snap_compare) -> None:
    assert snap_compare(_eight_long(), terminal_size=(120, 40))
