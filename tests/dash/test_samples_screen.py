"""The dashboard's samples: key w opens the selected run's newest samples (p/n step, b/x best/worst,
escaped text), and the run pane shows the newest sample's line. The monitor answers from a real
samples.jsonl through the same function the host agent runs (pippa_contract.samples.answer)."""

from __future__ import annotations

from pathlib import Path

import dash_state as S
import pytest
from textual.widgets import Static

from pippa_contract import samples as sm
from pippa_contract.alarms import NO_LEARNING_SIGNAL, write_alarms
from pippa_ops.dash import create_app
from pippa_ops.dash.samples_screen import SamplesScreen

pytestmark = pytest.mark.anyio
RUN = "20260101-120000-tiny-ab12"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _SampleMonitor:
    """A Monitor with no IO: its samples come from a run directory on disk."""

    def __init__(self, name: str, run_dir: Path) -> None:
        self.name, self.run_dir = name, run_dir
        self.requests: list[dict[str, object]] = []

    async def stream_gpus(self, emit) -> None: ...
    async def poll(self, emit) -> None: ...
    def follow(self, run_id, emit) -> None: ...
    def select(self, run_id) -> None: ...
    def follow_log(self, run_id, sink, cancelled) -> None: ...
    def stop_run(self, run_id) -> str:
        return ""

    def reconnect_now(self) -> None: ...
    def set_shown(self, shown: bool) -> None: ...
    def set_visible(self, visible: bool) -> None: ...
    def close(self) -> None: ...

    def samples(self, run_id: str, request: dict[str, object]) -> dict[str, object]:
        self.requests.append(dict(request))
        return sm.answer(run_id, str(self.run_dir), dict(request))


def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / RUN
    d.mkdir()
    rows = [
        sm.sample_row(
            s,
            "train",
            f"{i}+{s}=",
            f"{i + s}\x1b[2J" if i == 1 else f"said {i} at {s}",
            index=i,
            reward=float(i) if s == 40 else -float(i),
            rewards={"correct": i},
        )
        for s in (20, 40)
        for i in range(3)
    ]
    (d / sm.SAMPLES).write_bytes(b"".join(sm.encode(r) for r in rows))
    write_alarms(str(d / "alarms.json"), [{"kind": NO_LEARNING_SIGNAL, "since": 20, "message": "m"}])
    return d


def _body(app) -> str:
    return str(app.screen.query_one("#samples-body", Static).render())


async def _until(pilot, app, ok, deadline_s: float = 20.0) -> None:
    """Wait (with a deadline) until ``ok()``: the screen's fetch runs in a thread worker."""
    import time

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        await pilot.pause(0.05)
        try:
            if ok():
                return
        except Exception:
            pass
    assert ok()


async def test_key_w_shows_the_newest_samples_and_walks_the_steps(tmp_path: Path) -> None:
    mons = {h: _SampleMonitor(h, _run_dir(tmp_path) if h == "gpu-a" else tmp_path) for h in S.HOSTS}
    app = create_app(S.HOSTS, mons, states=S.states())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.selected == ("gpu-a", RUN)
        await pilot.press("w")
        shown = lambda: isinstance(app.screen, SamplesScreen) and "loading" not in _body(app)  # noqa: E731
        await _until(pilot, app, shown)
        assert isinstance(app.screen, SamplesScreen)
        body = _body(app)
        assert "step 40 · train #0" in body and "said 0 at 40" in body and "sampled steps: prev 20" in body
        assert "\x1b" not in body and "\\x1b[2J" in body  # the completion's control sequence, escaped
        assert "no_learning_signal" in body
        await pilot.press("p")
        await _until(pilot, app, lambda: "step 20 · train #0" in _body(app))
        assert "step 20 · train #0" in _body(app) and "step 40" not in _body(app).split("sampled")[0]
        await pilot.press("b")
        await _until(
            pilot,
            app,
            lambda: (
                app.screen.answer is not None
                and app.screen.order == "best"
                and _body(app).index("train #0") < _body(app).index("train #2")
            ),
        )
        body = _body(app)
        assert body.index("train #0") < body.index("train #2")  # step 20: reward -i, the best is #0
        await pilot.press("x")
        await _until(pilot, app, lambda: _body(app).index("train #2") < _body(app).index("train #0"))
        body = _body(app)
        assert body.index("train #2") < body.index("train #0")
        await pilot.press("n")
        await _until(pilot, app, lambda: "step 40 · train" in _body(app))
        assert "step 40 · train" in _body(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SamplesScreen)


async def test_the_run_pane_shows_the_newest_samples_line_under_the_curves(tmp_path: Path) -> None:
    mons = {h: _SampleMonitor(h, _run_dir(tmp_path) if h == "gpu-a" else tmp_path) for h in S.HOSTS}
    app = create_app(S.HOSTS, mons, states=S.states())
    async with app.run_test(size=(160, 48)) as pilot:
        line = app.query_one("#run-sample", Static)
        for _ in range(50):  # the first fetch runs in a worker as the run is selected
            await pilot.pause(0.05)
            if "step 40" in str(line.render()):
                break
        text = str(line.render())
        assert text.startswith("step 40 (train) reward") and line.display
        assert "no learning signal (step 20)" in text


def test_in_a_terminal_nothing_is_drawn_beside_the_blocks_frame_and_the_title_says_where() -> None:
    """At 80x24 with samples that fill several screens: the blocks' rules span the screen and no
    scrollbar glyph stands right of them (it did: two columns beside every rule); the title says which
    lines show, and follows a page down."""
    import os
    import secrets
    import subprocess
    import sys
    import time

    here = Path(__file__).parent
    tmux = ["tmux", "-L", "pippa-samples-" + secrets.token_hex(3)]
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}

    def screen_until(text: str) -> list[str]:
        deadline = time.monotonic() + 60
        while text not in (
            out := subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "d"], env=env, capture_output=True, text=True
            ).stdout
        ):
            assert time.monotonic() < deadline, out
            time.sleep(0.2)
        return out.splitlines()

    cmd = f"cd {here} && exec {sys.executable} samples_fixture_app.py"
    subprocess.run([*tmux, "new-session", "-d", "-s", "d", "-x", "80", "-y", "24", cmd], env=env, check=True)
    try:
        screen_until("step 40 (train)")  # the run pane has its newest sample: the run is selected
        subprocess.run([*tmux, "send-keys", "-t", "d", "w"], env=env, check=True)
        lines = screen_until("lines 1-")
        rules = [ln for ln in lines if ln.startswith("── step 40")]
        assert rules and all(len(ln) == 80 and ln.endswith("─") for ln in rules), "\n".join(lines)
        glyphs = set("▁▂▃▄▅▆▇█▏▎▍▌▋▊▉▐")
        assert not any(set(ln[-2:]) & glyphs for ln in lines[1:-1]), "\n".join(lines)
        assert "lines 1-22 of " in lines[0], lines[0]
        subprocess.run([*tmux, "send-keys", "-t", "d", "PageDown"], env=env, check=True)
        assert "lines 23-44 of " in screen_until("lines 23-")[0]
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
