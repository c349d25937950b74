"""``pippa dash``'s samples screen (key ``w``): what the selected run's model wrote, a step at a time.

The screen shows the blocks ``pippa samples`` prints (``pippa_ops.runs.reading.samples``: escaped, wrapped to
the screen), newest sampled step first; ``p``/``n`` go to the previous/next sampled step, ``b``/``x``
order the rows best or worst first, ``o`` back to the batch's order. Each fetch is one agent request
in a thread worker (``fetch``, given by the app: the host monitor's ``samples``); the widgets never
touch the network. ``newest_line`` is the run pane's one line under the curves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Label, Static
from textual.worker import get_current_worker

from pippa_ops.dash.run_view import RunView
from pippa_ops.runs.reading import samples

if TYPE_CHECKING:
    from pippa_contract.messages import SamplesAnswer, SamplesRequest

    Fetch = Callable[[SamplesRequest], SamplesAnswer]
STYLES = {"head": "bold", "prompt": "dim", "text": "", "meta": "cyan", "warn": "bold yellow"}
ROWS = 16  # rows fetched per step (the screen scrolls)


def styled(lines: list[samples.Line]) -> Text:
    text = Text()
    for style, line in lines:
        text.append(line + "\n", style=STYLES.get(style, ""))
    return text


class SamplesScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,w,q", "app.pop_screen", "back"),
        Binding("p", "step('prev')", "previous step"),
        Binding("n", "step('next')", "next step"),
        Binding("b", "order('best')", "best first"),
        Binding("x", "order('worst')", "worst first"),
        Binding("o", "order('batch')", "batch order"),
    ]

    def __init__(self, host: str, run_id: str, fetch: Fetch | None) -> None:
        super().__init__()
        self.host, self.run_id, self._fetch = host, run_id, fetch
        self.step: int | None = None  # None: the newest sampled step
        self.order = "batch"
        self.answer: SamplesAnswer | None = None

    def compose(self) -> ComposeResult:
        yield Label(self._title(), id="samples-title")
        with VerticalScroll(id="samples-scroll"):  # no scrollbar (dash.tcss): the title says where
            yield Static("loading…", id="samples-body")
        yield Footer()

    def _title(self, where: str = "") -> str:
        return f"{self.run_id} on {self.host}: what the model wrote{where} · esc: back"

    def _where(self, _: float = 0.0) -> None:
        """The title's ``lines A-B of N`` (the scrollbar's glyph stood outside the blocks' frame)."""
        scroll = self.query_one("#samples-scroll", VerticalScroll)
        total, seen = scroll.virtual_size.height, scroll.scrollable_content_region.height
        top = round(scroll.scroll_y)
        where = f" · lines {top + 1}-{min(total, top + seen)} of {total}" if total > seen > 0 else ""
        self.query_one("#samples-title", Label).update(self._title(where))

    def on_mount(self) -> None:
        scroll = self.query_one("#samples-scroll", VerticalScroll)
        self.watch(scroll, "scroll_y", self._where, init=False)
        self.watch(scroll, "virtual_size", lambda _: self._where(), init=False)
        if self._fetch is None:
            self.query_one("#samples-body", Static).update("samples are not available here")
            return
        self._load()

    def action_step(self, where: str) -> None:
        answer: dict[str, Any] = dict(self.answer or {})
        target = answer.get(where)
        if not isinstance(target, int):
            self.notify(f"no {'earlier' if where == 'prev' else 'later'} sampled step", severity="warning")
            return
        self.step = target
        self._load()

    def action_order(self, order: str) -> None:
        self.order = order
        self._load()

    def request(self) -> SamplesRequest:
        return {"step": self.step, "n": ROWS, "best": self.order == "best", "worst": self.order == "worst"}

    @work(thread=True, exclusive=True, group="samples")
    def _load(self) -> None:
        assert self._fetch is not None
        try:
            answer = self._fetch(self.request())
        except Exception as e:  # a host gone or a run removed: say so on the screen
            self.app.call_from_thread(self._show_error, f"{type(e).__name__}: {e}")
            return
        self.app.call_from_thread(self.show, answer)

    def show(self, answer: SamplesAnswer) -> None:
        self.answer = answer
        if self.step is None:
            self.step = answer.get("step")
        width = max(20, self.size.width)  # the whole width: the scroll has no scrollbar
        self.query_one("#samples-body", Static).update(styled(samples.blocks(answer, width)))

    def _show_error(self, line: str) -> None:
        self.query_one("#samples-body", Static).update(Text(line, style="red"))


def newest_line(fetch: Fetch, width: int = 200) -> str:
    """The run pane's line: the newest sample's step, reward and first line of its completion."""
    answer = fetch({"n": 1})
    rows: list[Any] = list(answer.get("rows") or [])
    line = samples.first_line(rows[0] if rows else None, width)
    warning = "; ".join(
        f"⚠ {a.get('kind', '').replace('_', ' ')} (step {a.get('since')})" for a in answer.get("alarms") or []
    )
    return " · ".join(x for x in (line, warning) if x)


def follow_newest(
    fetch: Fetch, still: Callable[[], bool], show: Callable[[str], None], every_s: float = 10.0
) -> None:
    """While ``still()`` (the run is selected, the app runs): the newest line now and every ``every_s``."""
    import contextlib
    import time

    while still():
        with contextlib.suppress(Exception):  # host gone: the pane keeps its line, the host panel says why
            show(newest_line(fetch))
        deadline = time.monotonic() + every_s
        while still() and time.monotonic() < deadline:
            time.sleep(0.2)


class SampleLineApp(Protocol):
    """What the run pane's sample line needs of the dashboard (``dash.app.DashApp``): declared here so
    that this module never imports the app that opens it."""

    monitors: dict[str, Any]
    selected: tuple[str, str] | None

    def query(self, selector: type[RunView]) -> Iterable[RunView]: ...

    def call_from_thread(self, callback: Callable[[str], None], *args: Any) -> Any: ...

    def run_worker(
        self,
        work: Callable[[], None],
        name: str | None = "",
        group: str = "default",
        description: str = "",
        exit_on_error: bool = True,
        start: bool = True,
        exclusive: bool = False,
        thread: bool = False,
    ) -> Any: ...


def follow_sample_line(app: SampleLineApp, host: str, run_id: str) -> None:
    """The run pane's newest-sample line, fetched now and every few seconds while the run is selected."""
    mon = app.monitors[host]
    if not hasattr(mon, "samples"):  # a monitor without samples (a test's recorder): no line
        return
    fetch = partial(mon.samples, run_id)

    def still() -> bool:  # cancelled: another run was selected, or the app is closing
        return app.selected == (host, run_id) and not get_current_worker().is_cancelled

    def draw(line: str) -> None:
        for view in app.query(RunView):
            view.show_sample_line(line)

    def show(line: str) -> None:
        app.call_from_thread(draw, line)

    app.run_worker(
        partial(follow_newest, fetch, still, show),
        thread=True,
        exclusive=True,
        group="sample-line",
        name=f"sample-line:{run_id}",
    )
