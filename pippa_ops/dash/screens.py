"""Secondary screens of ``pippa dash``: help, stop confirmation, full log."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Label, Log, Static
from textual.worker import get_current_worker

from pippa_contract.termsafe import screen_line

KEYS = (
    ("↑ ↓", "move between runs (and on to the next host)"),
    ("enter", "select the run: curves, W&B link, log tail"),
    ("a", "attach to the run's tmux session (detach with C-b d to come back)"),
    ("l", "full output log of the selected run"),
    ("w", "what the model wrote: the run's samples (p/n step, b/x best/worst)"),
    ("s", "stop the selected run (asks first)"),
    ("r", "reconnect unreachable hosts now"),
    ("e", "smooth the curves (EMA 0.6) or show them raw"),
    ("f", "fleet view: a line per host (/ filter, i p n sort, enter opens)"),
    ("?", "this help"),
    ("q", "quit"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Label("pippa dash: keys", id="help-title")
            yield Static("\n".join(f"{k:>6}  {what}" for k, what in KEYS))
            yield Label("esc closes", classes="dim")


class ConfirmStop(ModalScreen[bool]):
    """Stopping a run cannot be undone: ask first, default answer no."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, host: str, run_id: str) -> None:
        super().__init__()
        self.host, self.run_id = host, run_id

    def compose(self) -> ComposeResult:
        with Grid(id="confirm"):
            yield Label(f"Stop run {self.run_id} on {self.host}?", id="confirm-question")
            yield Button("Stop (y)", variant="error", id="yes")
            yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class MainHidden(Message):
    """The main screen (run lists) is hidden or shown again: hidden views are not polled."""

    def __init__(self, hidden: bool) -> None:
        super().__init__()
        self.hidden = hidden


LogReader = Callable[[Callable[[bytes], None], Callable[[], bool]], None]


class LogScreen(Screen[None]):
    """The whole output.log of a run, followed while this screen is shown (and only then)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,l,q", "app.pop_screen", "back")]

    def __init__(self, host: str, run_id: str, follow: LogReader | None) -> None:
        super().__init__()
        self.host, self.run_id, self._follow = host, run_id, follow
        self._partial = b""

    def compose(self) -> ComposeResult:
        yield Label(f"{self.run_id} on {self.host}: output.log (esc to go back)", id="log-title")
        yield Log(id="full-log", max_lines=20000, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        self.app.post_message(MainHidden(True))
        if self._follow is not None:
            self._read()

    def on_unmount(self) -> None:
        self.app.post_message(MainHidden(False))

    @work(thread=True, exclusive=True, group="full-log")
    def _read(self) -> None:
        worker = get_current_worker()
        assert self._follow is not None
        self._follow(
            lambda chunk: self.app.call_from_thread(self._append, chunk), lambda: worker.is_cancelled
        )

    def _append(self, chunk: bytes) -> None:
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if lines:
            # no escape sequence of the host's reaches the terminal (Log draws no SGR either)
            self.query_one(Log).write_lines(screen_line(ln) for ln in lines)
