"""`pippa up`: make a host ready to run the training code, and `pippa hosts`: who answers.

Steps, each skipped when already done so a second ``up`` takes seconds: probe the host in one
command (tmux, GPUs, driver, CUDA, python, uv, free disk), install uv for the user when missing,
sync the repo, run the host's setup (default ``uv sync --extra train --extra gpu``) with its output streamed,
push the named secrets, and report. Setup is skipped when neither its lines nor the project's
dependency files changed since it last succeeded on that host (recorded in ``.pippa/setup.json``).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pippa_ops.envfile import SecretsPush, push_secrets
from pippa_ops.errors import HostUnreachable, PippaError, RemoteCommandFailed, ToolMissing
from pippa_ops.fanout import fan_out
from pippa_ops.inventory import HostSpec
from pippa_ops.shell import export_line
from pippa_ops.sync import SyncResult, remote_dir_expr, sync
from pippa_ops.transport import Transport

DEFAULT_SETUP = ("uv sync --extra train --extra gpu",)
UV_INSTALL = (
    "curl -LsSf https://astral.sh/uv/install.sh | env UV_NO_MODIFY_PATH=1 sh"
    " || python3 -m pip install --user --quiet uv"
)
# Non-interactive ssh commands do not read ~/.profile, so uv's home is put on PATH explicitly.
PATH_PREFIX = 'export PATH="$HOME/.local/bin:$HOME/.cargo/bin:$PATH"'
DEPENDENCY_FILES = ("pyproject.toml", "uv.lock")

Emit = Callable[[str], None]


@dataclass(frozen=True)
class Probe:
    """Facts about a host, gathered in one command."""

    tmux: str | None  # "tmux 3.3a", None when missing
    gpus: tuple[str, ...]  # `nvidia-smi -L` lines; () on a host without GPU
    driver: str | None
    cuda: str | None
    python: str | None  # version of the host's python3
    uv: str | None
    free_disk_gb: float | None


@dataclass(frozen=True)
class UpReport:
    host: str
    remote_dir: str  # absolute
    probe: Probe
    python: str  # how the host runs the training code, and its version
    uv_installed: bool  # installed by this `up`
    sync: SyncResult
    setup_ran: bool
    secrets: SecretsPush
    elapsed_s: float
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        p = self.probe
        return {
            "host": self.host,
            "remote_dir": self.remote_dir,
            "gpus": list(p.gpus),
            "driver": p.driver,
            "cuda": p.cuda,
            "python": self.python,
            "uv": p.uv,
            "uv_installed": self.uv_installed,
            "free_disk_gb": p.free_disk_gb,
            "tmux": p.tmux,
            "synced_files": len(self.sync.sent),
            "setup_ran": self.setup_ran,
            "secrets_pushed": list(self.secrets.pushed),
            "secrets_missing": list(self.secrets.missing),
            "elapsed_s": round(self.elapsed_s, 2),
        }


_PROBE = r"""
echo "tmux=$(tmux -V 2>/dev/null)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L 2>/dev/null | sed 's/^/gpu=/'
  echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)"
  echo "cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)"
fi
echo "python=$(python3 --version 2>&1 | sed -n 's/^Python //p')"
echo "uv=$(uv --version 2>/dev/null)"
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free_kb=$(df -Pk "$d" | awk 'NR==2 {print $4}')"
"""


def probe_command(dir_expr: str) -> str:
    """One shell script printing ``key=value`` facts (and ``gpu=`` lines); never fails."""
    return f"{PATH_PREFIX}\nd={dir_expr}{_PROBE}"


def parse_probe(text: str) -> Probe:
    facts: dict[str, str] = {}
    gpus: list[str] = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "gpu":
            gpus.append(value.strip())
        else:
            facts[key] = value.strip()
    free_kb = facts.get("free_kb", "")
    return Probe(
        tmux=facts.get("tmux") or None,
        gpus=tuple(g for g in gpus if g),
        driver=facts.get("driver") or None,
        cuda=facts.get("cuda") or None,
        python=facts.get("python") or None,
        uv=facts.get("uv") or None,
        free_disk_gb=round(int(free_kb) / 1024**2, 1) if free_kb.isdigit() else None,
    )


def probe(transport: Transport, spec: HostSpec) -> Probe:
    r = transport.run(probe_command(remote_dir_expr(spec.remote_dir)), timeout=60)
    return parse_probe(r.stdout)


def setup_key(spec: HostSpec, repo: Path) -> str:
    """What setup's result depends on: its lines and the project's dependency files."""
    h = hashlib.sha256("\n".join(spec.setup or DEFAULT_SETUP).encode())
    for name in DEPENDENCY_FILES:
        path = repo / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    return h.hexdigest()


def run_streamed(transport: Transport, line: str, emit: Emit, what: str) -> None:
    """Run ``line`` with stderr merged, handing each output line to ``emit``; raise on failure."""
    proc = transport.start(f"{{ {line}\n}} 2>&1")
    tail: list[str] = []
    with proc:
        proc.close_stdin()
        while raw := proc.readline():
            text = raw.decode(errors="replace").rstrip("\n")
            tail = [*tail[-4:], text]
            emit(text)
        status = proc.wait()
    if status != 0:
        last = next((t for t in reversed(tail) if t.strip()), "no output")
        raise RemoteCommandFailed(f"{transport.name}: {what} failed with exit status {status}: {last}")


def up(
    spec: HostSpec,
    transport: Transport,
    repo: Path,
    *,
    emit: Emit = lambda _line: None,
    env_path: Path | None = None,
) -> UpReport:
    """Prepare the host; see the module docstring. ``emit`` receives progress lines for people."""
    t0 = time.monotonic()
    facts = probe(transport, spec)
    if facts.tmux is None:
        raise ToolMissing(f"{spec.name}: tmux is not installed on the host (sudo apt-get install tmux)")
    emit(
        f"gpus: {len(facts.gpus) or 'none'}; python3 {facts.python or 'missing'}; uv {facts.uv or 'missing'}"
    )
    uv_installed = False
    if facts.uv is None:
        emit("installing uv for the user (~/.local/bin)")
        run_streamed(transport, UV_INSTALL, emit, "installing uv")
        r = transport.run(f"{PATH_PREFIX}; uv --version", timeout=30)
        if not r.ok:
            raise ToolMissing(f"{spec.name}: uv installation did not produce a working uv")
        facts = Probe(**{**facts.__dict__, "uv": r.stdout.strip()})
        uv_installed = True
    synced = sync(spec, transport, repo, progress=None)
    emit(f"synced {len(synced.sent)} changed file(s) of {synced.files}")
    dir_expr = remote_dir_expr(spec.remote_dir)  # for local: the repo root, absolute
    key = setup_key(spec, repo)
    done = transport.run(f"cat {dir_expr}/.pippa/setup.json 2>/dev/null", timeout=30).stdout
    setup_ran = _recorded_key(done) != key
    if setup_ran:
        lines = " && ".join(f"( {line}\n)" for line in (spec.setup or DEFAULT_SETUP))
        emit(f"setup: {'; '.join(spec.setup or DEFAULT_SETUP)}")
        run_streamed(
            transport, f"{PATH_PREFIX} && {export_line(spec.env)} && cd {dir_expr} && {lines}", emit, "setup"
        )
        record = shlex.quote(json.dumps({"key": key, "time": time.time()}))
        transport.run(f"mkdir -p {dir_expr}/.pippa && printf '%s\\n' {record} > {dir_expr}/.pippa/setup.json")
    else:
        emit("setup: up to date")
    python = spec.python or f"{spec.remote_dir.rstrip('/')}/.venv/bin/python"
    py_expr = remote_dir_expr(python) if python.startswith(("~", "/")) else shlex.quote(python)
    r = transport.run(f"{py_expr} --version", timeout=30)
    if not r.ok:
        raise ToolMissing(f"{spec.name}: the training python {python} does not run: {r.stderr.strip()}")
    secrets = push_secrets(transport, spec.secrets, env_path or repo / ".env")
    remote_dir = str(repo) if spec.is_local else transport.expand(spec.remote_dir)
    return UpReport(
        host=spec.name,
        remote_dir=remote_dir,
        probe=facts,
        python=f"{python} ({(r.stdout or r.stderr).strip()})",
        uv_installed=uv_installed,
        sync=synced,
        setup_ran=setup_ran,
        secrets=secrets,
        elapsed_s=time.monotonic() - t0,
    )


def _recorded_key(text: str) -> str | None:
    try:
        value = json.loads(text).get("key")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class HostRow:
    """One line of `pippa hosts`."""

    name: str
    address: str
    user: str | None
    port: int | None
    source: str
    remote_dir: str
    reachable: bool
    latency_ms: float | None
    error: str | None

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def survey(
    specs: list[HostSpec], open_transport: Callable[[HostSpec], Transport], timeout: float = 5.0
) -> list[HostRow]:
    """Every host of the inventory with reachability checked in parallel (one bad host stops none)."""

    by_name = {s.name: s for s in specs}

    def check(name: str) -> float:
        t0 = time.monotonic()
        if by_name[name].is_local:
            return 0.0
        with open_transport(by_name[name]) as t:
            try:
                t.run("true", timeout=timeout, check=True)
            except TimeoutError as e:
                raise HostUnreachable(f"{name}: no answer within {timeout:.0f}s") from e
        return (time.monotonic() - t0) * 1000

    results = fan_out(list(by_name), check)
    rows = []
    for spec in specs:
        res = results[spec.name]
        ok = not isinstance(res, PippaError)
        rows.append(
            HostRow(
                name=spec.name,
                address=spec.address or "this machine",
                user=spec.user,
                port=spec.port,
                source=spec.source,
                remote_dir=spec.remote_dir,
                reachable=ok,
                latency_ms=round(res, 1) if not isinstance(res, PippaError) else None,
                error=None if ok else str(res),
            )
        )
    return rows
