"""The dashboard in a real terminal (tmux) at 80x24 and 120x40 with an 8-GPU host, a priced run in a
long state above the running one (issue 32): no glyph outside a panel's border, every chart titled,
no cell cut mid-number, a GPU a line, and the running run selected at start."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
BARS = "▏▎▍▌▋▊▉▐"  # scrollbar glyphs (the GPU sparklines use the lower blocks ▁..█)


def _screen(width: int, height: int, keys: tuple[str, ...] = (), settle: bool = False) -> list[str]:
    sock = "pippa-layout-" + secrets.token_hex(3)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    tmux = ["tmux", "-L", sock]

    def capture() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "d"], env=env, capture_output=True, text=True
        ).stdout

    cmd = f"cd {HERE} && exec {sys.executable} dash_fixture_app.py"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "d", "-x", str(width), "-y", str(height), cmd], env=env, check=True
    )
    try:
        deadline = time.monotonic() + 60
        while "step 42" not in (screen := capture()):
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
        while settle:  # the first frames come before the layout for the terminal's size: until it holds
            time.sleep(1.0)
            settle, screen = capture() != screen, capture()
            assert time.monotonic() < deadline + 30, screen
        for key in keys:
            subprocess.run([*tmux, "send-keys", "-t", "d", key], env=env, check=True)
        if keys:
            deadline = time.monotonic() + 30
            while "(EMA" not in screen:
                assert time.monotonic() < deadline, screen
                time.sleep(0.2)
                screen = capture()
        return screen.splitlines()
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)


@pytest.mark.parametrize(("width", "height"), [(80, 24), (120, 40)])
def test_the_8_gpu_host_with_a_long_state_fits_its_borders_and_titles_every_chart(
    width: int, height: int
) -> None:
    lines = _screen(width, height, keys=("e",))  # EMA on: the longest titles
    top = next(i for i, ln in enumerate(lines) if ln.startswith("╭─ gpu-8"))
    edge = lines[top].index("╮")
    bottom = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
    for ln in lines[top : bottom + 1]:
        assert ln[edge] in "│╮╯" and ln[edge + 1 : edge + 2] in ("", " "), f"a glyph at the border:\n{ln}"
        assert not set(ln[: edge + 1]) & set(BARS), f"a scrollbar in the panel:\n{ln}"
    panel = "\n".join(ln[: edge + 1] for ln in lines[top : bottom + 1])
    row = next(ln for ln in panel.splitlines() if "ab99" in ln)
    assert "1h02m $12.35" in row and not re.search(r"[0-9$.]…", panel), f"a cell cut:\n{panel}"
    gpus = [ln for ln in panel.splitlines() if "H100" in ln]
    assert len(gpus) == (1 if height < 30 else 8), panel  # one summary line, or a line per GPU, no wrap
    text = "\n".join(lines)
    right = 0 if width < 100 else edge + 1  # narrow: the run is under the hosts, else beside them
    titles = " ".join(lines[i][right:] for i in range(len(lines) - 1) if "┌" in lines[i + 1][right:])
    for title in ("reward", "loss", "length", "grad"):
        assert title in titles, f"the {title} chart is untitled:\n{text}"
    assert "tiny-ab12 on gpu-8 · running" in text, "the running run is selected at start, not the newest"


def test_at_80x24_every_hosts_name_and_state_is_on_the_first_screen() -> None:
    """Two hosts, an 8-GPU one with runs first: its panel fills the hosts' part of an 80x24 terminal and
    the second panel is scrolled out of it; the header line names every host with its state."""
    lines = _screen(80, 24, settle=True)
    text = "\n".join(lines)
    assert "╭─ local" not in text, "the fixture no longer hides the second panel: this test shows nothing"
    assert "gpu-8 up, 1 running · local up" in lines[0], text
