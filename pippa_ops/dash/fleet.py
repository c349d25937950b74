"""The fleet view of ``pippa dash``: one line per host, for when the host panels do not fit.

A line: name, state (up / down / key: its host key is unknown or changed), the last doctor verdict
and its age (``HostState.doctor``, from the host monitor's ``DoctorRead``; ``-`` while none is known),
a bar pair per GPU (utilization then memory, one block each: 8 GPUs in 16 columns), busy/idle GPUs,
the running runs (name, step, reward, attempt) and the newest problem. ``/`` filters by name (type
part of it; Enter opens the highlighted host, Esc clears), ``i`` ``p`` ``n`` sort by idle GPUs,
problems, name; Enter opens the host's panel. The widget draws state handed down by the app and says
which hosts are on screen (``Visible``), so the app samples the others slowly.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widget import Widget

from pippa_ops.doctor import age
from pippa_ops.monitor.state import GpuState, HostState, RunRow

BARS = " ▁▂▃▄▅▆▇█"
STAMP = re.compile(r"^\d{8}-\d{6}-")
BUSY_PCT = 5.0  # a GPU with this much utilization or memory in use is busy
PROBLEMS = ("failed", "lost", "stalled", "killed", "diverged", "crashed", "unknown")
SORTS = {"i": "idle GPUs", "p": "problems", "n": "name"}
NAME_W, STATE_W, DOCTOR_W, GPUS_W, COUNT_W = 14, 4, 8, 17, 5


def bar(pct: float | None) -> str:
    if pct is None:
        return "?"
    return BARS[min(len(BARS) - 1, max(0, round(pct / 100 * (len(BARS) - 1))))]


def busy(g: GpuState) -> bool:
    r = g.reading
    return (r.util_pct or 0.0) >= BUSY_PCT or (r.mem_pct or 0.0) >= BUSY_PCT


def state_word(h: HostState) -> tuple[str, str]:
    if h.link == "down":
        if h.reason and "host key" in h.reason.lower():
            return "key", "bold magenta"
        return "down", "bold red"
    if h.link == "connecting":
        return "…", "yellow"
    return "up", "green"


def problem_runs(h: HostState) -> list[RunRow]:
    return [r for r in h.runs if r.state.partition(" ")[0] in PROBLEMS]


def running(h: HostState) -> list[RunRow]:
    return [r for r in h.runs if r.state.partition(" ")[0] == "running"]


def problem(h: HostState) -> str:
    """The newest problem: the host's own (unreachable), else the newest failed/lost/stalled run, else
    GPUs idle with nothing running."""
    if h.link == "down":
        return h.reason or "unreachable"
    bad = problem_runs(h)
    if bad:  # the run's name (its id without the start time, as the runs column): fits 80 columns
        return f"{run_name(bad[0].run_id)} {bad[0].state}"
    if h.gpus and not running(h) and not any(busy(g) for g in h.gpus):
        return "idle"
    return ""


def problems(h: HostState) -> int:
    return (100 if h.link == "down" else 0) + len(problem_runs(h))


def idle_gpus(h: HostState) -> int:
    return sum(1 for g in h.gpus or () if not busy(g))


def run_name(run_id: str) -> str:
    """A run id without its start time (``20261126-185651-gsm8k-ab12`` -> ``gsm8k-ab12``): the name."""
    return STAMP.sub("", run_id)[:18]


def run_text(r: RunRow, detail: int = 2) -> str:
    """The run's name, then (``detail`` >= 1) its step and attempt, then (2) its last reward."""
    attempt = r.state.partition("attempt ")[2].split("/")[0] if "attempt" in r.state else ""
    parts = [run_name(r.run_id)]
    if r.step is not None and detail >= 1:
        parts.append(f"s{r.step}")
    if r.last_reward is not None and detail >= 2:
        parts.append(f"r{r.last_reward:.2f}")
    if attempt and detail >= 1:
        parts.append(f"a{attempt}")
    return " ".join(parts)


def runs_and_problem(h: HostState, rest: int) -> tuple[str, str]:
    """(running runs, problem) in ``rest`` cells: the running run never gives way to a problem, and a
    run's name is never cut. Both whole if they fit; else the problem's state shortened to its first
    word, then the running run's reward and step dropped, then the problem as a count (``1 failed``);
    else the running run alone."""
    runs = running(h)
    more = f" +{len(runs) - 1}" if len(runs) > 1 else ""
    whats = [run_text(runs[0], d) + more for d in (2, 1, 0)] if runs else [""]
    trouble = problem(h)
    if not trouble:
        return whats[0][:rest], ""
    bad = problem_runs(h) if h.link != "down" else []
    word = bad[0].state.partition(" ")[0] if bad else ""
    shorter = [f"{run_name(bad[0].run_id)} {word}"] if bad else []
    counted = [f"{len(bad)} {word}" if len(bad) == 1 else f"{len(bad)} problems"] if bad else []
    tries = [
        (whats[0], trouble),
        *((w, t) for w in whats for t in shorter),
        *((w, t) for w in whats for t in counted),
    ]
    for what, t in tries:
        if len(what) + (1 if what else 0) + len(t) <= rest:
            return what, t
    if not runs:  # the host's own problem (down) or idle: cut to the room
        return "", trouble[:rest]
    return whats[0][:rest], ""


def fleet_row(h: HostState, width: int, now: float | None = None) -> Text:
    """One host in one line of ``width`` cells."""
    doctor = h.doctor
    if doctor and h.doctor_time is not None:
        doctor += " " + age(max(0.0, (now or time.time()) - h.doctor_time))
    word, style = state_word(h)
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{h.name[:NAME_W]:<{NAME_W}} ", style="bold")
    line.append(f"{word:<{STATE_W}} ", style=style)
    doctor_style = {"fail": "bold red", "warn": "yellow", "ok": "green"}.get(h.doctor or "", "dim")
    line.append(f"{(doctor or '-')[:DOCTOR_W]:<{DOCTOR_W}} ", style=doctor_style)
    gpus = h.gpus or ()
    dim = "dim" if h.link == "down" else ""
    cells = Text()
    for g in gpus[:8]:
        cells.append(bar(g.reading.util_pct), style=dim or "green")
        cells.append(bar(g.reading.mem_pct), style=dim or "cyan")
    if not gpus:
        cells.append("no GPU" if h.gpus == () else "-", style="dim")
    cells.truncate(GPUS_W - 1)
    cells.pad_right(GPUS_W - 1 - cells.cell_len)
    line.append_text(cells)
    line.append(" ")
    count = f"{len(gpus) - idle_gpus(h)}/{idle_gpus(h)}" if gpus else "-"
    line.append(f"{count:>{COUNT_W}} ")
    rest = width - line.cell_len
    what, trouble = runs_and_problem(h, rest)
    line.append(what if trouble else f"{what:<{rest}}")
    if trouble:
        line.append(" " if what else "")
        line.append(trouble, style="red" if trouble != "idle" else "yellow")
    line.truncate(width)
    return line


def header(width: int) -> Text:
    t = Text(no_wrap=True, style="bold reverse")
    t.append(f"{'host':<{NAME_W}} {'st':<{STATE_W}} {'doctor':<{DOCTOR_W}} {'GPU util|mem':<{GPUS_W - 1}} ")
    t.append(f"{'b/i':>{COUNT_W}} runs / problem")
    t.pad_right(max(0, width - t.cell_len))
    t.truncate(width)
    return t


def ordered(states: Sequence[HostState], sort: str, needle: str) -> list[HostState]:
    shown = [h for h in states if needle.lower() in h.name.lower()]
    if sort == "i":
        return sorted(shown, key=lambda h: (-idle_gpus(h), h.name))
    if sort == "p":
        return sorted(shown, key=lambda h: (-problems(h), h.name))
    return sorted(shown, key=lambda h: h.name)


class FleetView(Widget, can_focus=True):
    """Every host in a line; the app hands it the states (``show``) and reads its messages."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "move(-20)", show=False),
        Binding("pagedown", "move(20)", show=False),
        Binding("home", "move(-100000)", show=False),
        Binding("end", "move(100000)", show=False),
        Binding("enter", "open", "open host"),
        Binding("slash", "filter", "filter", key_display="/"),
        Binding("i", "sort('i')", "sort idle"),
        Binding("p", "sort('p')", "sort problems"),
        Binding("n", "sort('n')", "sort name"),
    ]

    class Open(Message):
        """Enter on a host: the app opens its panel."""

        def __init__(self, host: str) -> None:
            super().__init__()
            self.host = host

    class Visible(Message):
        """The hosts now on screen (the others are sampled slowly)."""

        def __init__(self, hosts: frozenset[str]) -> None:
            super().__init__()
            self.hosts = hosts

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.states: list[HostState] = []
        self.sort = "n"
        self.needle = ""
        self.filtering = False
        self.cursor = 0
        self.top = 0
        self._rows: list[HostState] = []
        self._visible: frozenset[str] | None = None

    # ------------------------------------------------------------------------------------- state
    def show(self, states: Sequence[HostState]) -> None:
        self.states = list(states)
        self._layout_rows()
        self.refresh()

    def _layout_rows(self, *, keep: bool = True) -> None:
        """Order and filter the rows; the cursor stays on its host (``keep``) or goes to the first."""
        current = self._rows[self.cursor].name if keep and 0 <= self.cursor < len(self._rows) else None
        self._rows = ordered(self.states, self.sort, self.needle)
        names = [h.name for h in self._rows]
        self.cursor = names.index(current) if current in names else min(self.cursor, max(0, len(names) - 1))
        room = self._room()
        self.top = min(max(self.top, self.cursor - room + 1), self.cursor)
        self.top = max(0, min(self.top, max(0, len(self._rows) - room)))
        visible = frozenset(names[self.top : self.top + room])
        if visible != self._visible:
            self._visible = visible
            self.post_message(self.Visible(visible))

    def _room(self) -> int:
        return max(1, self.size.height - 2)  # the header and the status line

    @property
    def highlighted(self) -> str | None:
        return self._rows[self.cursor].name if 0 <= self.cursor < len(self._rows) else None

    def on_resize(self, _: events.Resize) -> None:
        self._layout_rows()

    def render(self) -> Text:
        width = max(20, self.size.width)
        room = self._room()
        lines = [header(width)]
        for i, h in enumerate(self._rows[self.top : self.top + room], start=self.top):
            row = fleet_row(h, width)
            if i == self.cursor:
                row.stylize("reverse" if self.has_focus else "underline")
            lines.append(row)
        lines += [Text("")] * (room - (len(lines) - 1))
        up = sum(1 for h in self.states if h.link == "up")
        foot = f"{len(self._rows)}/{len(self.states)} hosts, {up} up · sort: {SORTS[self.sort]}"
        if self.filtering or self.needle:
            foot += f" · filter: {self.needle}" + ("▏" if self.filtering else "")
        lines.append(Text(foot, style="bold" if self.filtering else "dim", no_wrap=True))
        return Text("\n").join(lines)

    # ------------------------------------------------------------------------------------ actions
    def action_move(self, step: int) -> None:
        self.cursor = max(0, min(len(self._rows) - 1, self.cursor + step))
        self._layout_rows()
        self.refresh()

    def action_open(self) -> None:
        self.filtering = False
        if self.highlighted is not None:
            self.post_message(self.Open(self.highlighted))
        self.refresh()

    def action_filter(self) -> None:
        self.filtering = True
        self.refresh()

    def action_sort(self, key: str) -> None:
        self.sort = key
        self.cursor = 0
        self._layout_rows(keep=False)
        self.refresh()

    def on_key(self, event: events.Key) -> None:
        """``/`` and what follows it, handled here as the keys arrive: a binding's action would run
        after the keys typed right behind it (a fast typist, a paste), which would be lost."""
        if not self.filtering:
            if event.key == "slash":
                self.filtering = True
            elif event.key == "escape" and self.needle:
                self._set_needle("")
            else:
                return
        elif event.key == "enter":
            self.action_open()
        elif event.key == "escape":
            self.filtering = False
            self._set_needle("")
        elif event.key == "backspace":
            self._set_needle(self.needle[:-1])
        elif event.character and event.character.isprintable() and len(event.character) == 1:
            self._set_needle(self.needle + event.character)
        else:
            return
        event.stop()
        event.prevent_default()
        self.refresh()

    def _set_needle(self, needle: str) -> None:
        self.needle = needle
        self.cursor = 0
        self._layout_rows(keep=False)
        self.refresh()
