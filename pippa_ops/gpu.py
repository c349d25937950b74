"""GPUs of a host from ``nvidia-smi``: one query command, a parser, and a streaming sampler.

Why parse CSV and not NVML: the laptop has no NVML and the host needs nothing installed; nvidia-smi's
``--query-gpu ... --format=csv,noheader,nounits`` is the stable scripting interface. Values nvidia-smi
cannot give (``[N/A]``, ``N/A``, ``[Not Supported]``, deprecated fields) become None, never 0.
Outputs with a header line (``--format=csv``) go through the header-aware path, which maps the names
(units such as `` [MiB]`` stripped) to our fields, so captures made with other field lists still parse.

``GpuStream`` runs nvidia-smi's own loop (``-l N``) on ONE channel and yields a parsed sample per
interval; the dashboard reuses it. Nothing here imports typer/rich/textual.
"""

from __future__ import annotations

import csv
import io
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pippa_contract import verbs
from pippa_contract.termsafe import escape
from pippa_ops.errors import HostUnreachable, ToolMissing
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Process, Transport
from pippa_ops.transport.shell import join

NVIDIA_SMI = "nvidia-smi"
# The fields pippa asks for, in order (uuid last: it maps compute processes to their GPU).
QUERY_FIELDS = (
    "index",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "driver_version",
    "uuid",
)
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
STREAM_FIELDS = (*QUERY_FIELDS, "count")  # count: how many rows make one sample of the loop
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "[unknown error]", "[insufficient permissions]"}
_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "used_gpu_memory": "used_memory", "name": "name"}
_SEP = "@@pippa-apps@@"


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str
    used_mib: float | None


@dataclass(frozen=True)
class Gpu:
    """One GPU as ``pippa gpus`` and the dashboard show it. Units: %, MiB, °C, W."""

    index: int | None
    name: str
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    driver: str | None = None
    uuid: str | None = None
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return 100.0 * self.mem_used_mib / self.mem_total_mib

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuReport:
    """A host's GPUs, or why it has none (``unavailable`` is one line for people)."""

    host: str
    gpus: tuple[Gpu, ...] = ()
    unavailable: str | None = None


def query_argv(loop_s: float | None = None, fields: Sequence[str] = QUERY_FIELDS) -> list[str]:
    argv = [NVIDIA_SMI, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
    if loop_s is not None:
        argv += ["-l", str(max(1, round(loop_s)))]
    return argv


def apps_argv() -> list[str]:
    return [NVIDIA_SMI, "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"]


def value(text: str | None) -> str | None:
    """A cell without padding, control characters escaped (the host's words: a GPU or process name
    reaches tables and the dashboard); None for what nvidia-smi could not report."""
    if text is None:
        return None
    text = escape(text.strip())
    if text.lower() in _MISSING or text.startswith("[") or text.lower().startswith("requested functionality"):
        return None
    return text


def number(text: str | None) -> float | None:
    """``"19818 MiB"``, ``"100 %"``, ``"631.95"`` → float; None when missing or not a number."""
    v = value(text)
    if v is None:
        return None
    try:
        return float(v.split()[0])
    except (ValueError, IndexError):
        return None


def _rows(text: str) -> list[list[str]]:
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    return [row for row in reader if row and any(c.strip() for c in row)]


def _field_name(header: str) -> str:
    name = re.sub(r"\s*\[[^\]]*\]$", "", header.strip())  # "memory.used [MiB]" -> "memory.used"
    return _ALIASES.get(name, name)


def _gpu_from(cells: dict[str, str]) -> Gpu:
    index = number(cells.get("index"))
    return Gpu(
        index=int(index) if index is not None else None,
        name=value(cells.get("name")) or "?",
        util_pct=number(cells.get("utilization.gpu")),
        mem_used_mib=number(cells.get("memory.used")),
        mem_total_mib=number(cells.get("memory.total")),
        temp_c=number(cells.get("temperature.gpu")),
        power_w=number(cells.get("power.draw")),
        power_limit_w=number(cells.get("power.limit")),
        driver=value(cells.get("driver_version")),
        uuid=value(cells.get("uuid")),
    )


def parse_gpus(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[Gpu]:
    """Header-less output (``noheader``) whose columns are ``fields``; short rows are skipped."""
    names = [_field_name(f) for f in fields]
    return [_gpu_from(dict(zip(names, row, strict=False))) for row in _rows(text) if len(row) >= len(names)]


def parse_gpus_csv(text: str) -> list[Gpu]:
    """Output with its header line (``--format=csv``): any field list, any order, units or not."""
    rows = _rows(text)
    if not rows:
        return []
    names = [_field_name(h) for h in rows[0]]
    return [_gpu_from(dict(zip(names, row, strict=False))) for row in rows[1:] if len(row) == len(names)]


def parse_apps(
    text: str, fields: Sequence[str] = APP_FIELDS, header: bool = False
) -> list[tuple[str, GpuProcess]]:
    """``(gpu uuid, process)`` pairs from ``--query-compute-apps`` output."""
    rows = _rows(text)
    names = [_field_name(f) for f in fields]
    if header and rows:
        names, rows = [_field_name(h) for h in rows[0]], rows[1:]
    out = []
    for row in rows:
        if len(row) != len(names):
            continue  # e.g. "No running processes found" or a process name with a comma
        cells = dict(zip(names, row, strict=True))
        pid = number(cells.get("pid"))
        out.append(
            (
                value(cells.get("uuid")) or "",
                GpuProcess(
                    int(pid) if pid is not None else None,
                    value(cells.get("process_name")) or "?",
                    number(cells.get("used_memory")),
                ),
            )
        )
    return out


def attach_processes(gpus: Sequence[Gpu], apps: Sequence[tuple[str, GpuProcess]]) -> list[Gpu]:
    """Each GPU with the compute processes whose GPU uuid is its uuid."""
    return [replace(g, processes=tuple(p for uuid, p in apps if uuid and uuid == g.uuid)) for g in gpus]


def parse_report(host: str, stdout: str) -> GpuReport:
    """Parse the two queries' output, separated by ``_SEP`` (pure)."""
    gpu_text, _, apps_text = stdout.partition(_SEP)
    return parse_outputs(host, gpu_text, apps_text)


def parse_outputs(host: str, gpu_text: str, apps_text: str) -> GpuReport:
    """The GPU query's and the compute-process query's output as a report (pure)."""
    gpus = parse_gpus(gpu_text)
    if not gpus:
        first = next((line.strip() for line in gpu_text.splitlines() if line.strip()), "no output")
        return GpuReport(host, unavailable=f"{host}: no NVIDIA GPU ({first})")
    return GpuReport(host, tuple(attach_processes(gpus, parse_apps(apps_text))))


def query(transport: Transport) -> GpuReport:
    """The host's GPUs and their processes, in one request to the host agent (``gpu_report``)."""
    answer = verbs.gpu_report(agent_client.Once(transport), query_argv(), apps_argv())
    if not answer.get("smi"):
        why = "no NVIDIA GPU (nvidia-smi not found)"
        return GpuReport(transport.name, unavailable=f"{transport.name}: {why}")
    return parse_outputs(transport.name, answer.get("gpus", ""), answer.get("apps", ""))


def with_processes(sample: Sequence[Gpu], report: GpuReport) -> list[Gpu]:
    """A stream's sample (no processes: nvidia-smi's loop is a GPU query) with the processes of a
    full ``query`` on the same GPUs (matched by uuid)."""
    by_uuid = {g.uuid: g.processes for g in report.gpus if g.uuid}
    return [replace(g, processes=by_uuid.get(g.uuid, ())) if g.uuid else g for g in sample]


def stream_row(line: bytes) -> tuple[Gpu, int | None] | None:
    """One line of the streaming query (``STREAM_FIELDS``): the GPU and how many rows make its sample
    (None: not said); None for a line that is not one."""
    row = _rows(line.decode(errors="replace"))
    if not row or len(row[0]) < len(STREAM_FIELDS):
        return None
    count = number(row[0][-1])
    return _gpu_from(dict(zip(STREAM_FIELDS, row[0], strict=False))), None if count is None else int(count)


class Samples:
    """The streaming query's lines gathered into samples (one GPU list per interval), for the blocking
    reader here and the dashboard's reader on its loop alike."""

    def __init__(self) -> None:
        self._batch: list[Gpu] = []

    def add(self, line: bytes) -> list[Gpu] | None:
        """The whole sample this line completes, else None (a partial one, or not a row)."""
        row = stream_row(line)
        if row is None:
            return None
        self._batch.append(row[0])
        if row[1] is not None and len(self._batch) < row[1]:
            return None
        sample, self._batch = self._batch, []
        return sample


class GpuStream:
    """nvidia-smi's own loop on one channel; ``samples()`` yields a GPU list per interval.

    Used as is by ``pippa gpus --watch`` and the dashboard. Lines are read in blocks (the process's
    buffered reader); a host silent for ``stall_s`` raises HostUnreachable (a hung link is a lost
    host); ``close()`` may come from any thread: the iterating thread then just stops.
    """

    def __init__(self, transport: Transport, interval_s: float = 2.0, stall_s: float | None = None) -> None:
        self.transport = transport
        self.interval_s = interval_s
        self.stall_s = max(10.0, 5 * interval_s) if stall_s is None else stall_s
        self._lock = threading.Lock()
        self._proc: Process | None = None
        self._closed = False

    def samples(self) -> Iterator[list[Gpu]]:
        with self._lock:
            if self._closed:
                return
            proc = self._proc = self.transport.start(join(query_argv(self.interval_s, STREAM_FIELDS)))
        samples = Samples()
        try:
            while True:
                proc.set_deadline(time.monotonic() + self.stall_s)
                try:
                    line = proc.readline()
                except TimeoutError as e:
                    if self._closed:
                        return
                    raise HostUnreachable(f"{self.transport.name}: no answer for {self.stall_s:.0f}s") from e
                if not line:
                    break
                if (sample := samples.add(line)) is not None:
                    yield sample
            if self._closed:
                return  # ended by close(), not by nvidia-smi: its exit status says nothing
            code = proc.wait(10)
            if code == 127:
                raise ToolMissing(f"{self.transport.name}: no NVIDIA GPU (nvidia-smi not found)")
        finally:
            self.close()

    def close(self) -> None:
        """End the stream (idempotent, any thread); a ``samples()`` loop in progress stops."""
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
