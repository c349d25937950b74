"""`pippa up`: make a host ready to run the training code, and `pippa hosts`: who answers.

Steps, each skipped when already done so a second ``up`` takes seconds: probe the host in one
round trip through the host agent (tmux, GPUs, driver, CUDA, python3 >= 3.8 which the agent itself
needs, uv, free disk, the bubblewrap code sandbox), install uv for the user only when the setup uses
it, install bubblewrap when the user may (root or passwordless sudo, apt-get; never fatal), sync the
repo, run the host's setup (default ``uv sync --locked --extra train --extra gpu``; ``setup = []``: none)
with its output streamed, push the named secrets, and report. Setup is skipped when neither its
lines nor the project's dependency files changed since it last succeeded on that host (recorded in
``.pippa/setup.json``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pippa_contract import cgroupdeleg, verbs
from pippa_contract.runfacts import reason_line
from pippa_contract.secrets import HEARTBEAT
from pippa_ops.doctor import check_host
from pippa_ops.errors import RemoteCommandFailed, ToolMissing
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.provision import alerts
from pippa_ops.provision.alerts import AlertsSetup
from pippa_ops.provision.envfile import SecretsPush, push_secrets
from pippa_ops.runs.records.follow import read_all
from pippa_ops.sync import SyncResult, remote_dir_expr, sync
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import export_line

# --locked: the committed uv.lock, so two hosts set up on different days get the same versions.
DEFAULT_SETUP = ("uv sync --locked --extra train --extra gpu",)
# Non-interactive ssh commands do not read ~/.profile, so uv's home is put on PATH explicitly.
PATH_PREFIX = 'export PATH="$HOME/.local/bin:$HOME/.cargo/bin:$PATH"'
DEPENDENCY_FILES = ("pyproject.toml", "uv.lock")
_USES_UV = re.compile(r"(^|[\s;&|(])uvx?(\s|$)")

Emit = Callable[[str], None]


@dataclass(frozen=True)
class Sandbox:
    """Can the host run the code sandbox (bubblewrap)? Needed only by code recipes."""

    bwrap: str | None  # its path, None when missing
    works: bool  # a trial `bwrap --unshare-all true` succeeded
    why: str  # why not, when it does not work
    root: bool
    sudo: bool  # passwordless
    userns: bool | None  # unprivileged user namespaces allowed (None: unknown)
    apt: bool
    seccomp: bool = False  # libseccomp2 is installed (the sandbox's seccomp filter needs it)
    cgroups: bool = False  # memory and pids cgroups for a run's processes together (root's or delegated)
    cgroups_why: str = ""  # which cgroups (root's, a delegated subtree) or why none
    level: str = "unsafe"  # the strongest sandbox.isolation a recipe can ask for here

    @classmethod
    def from_json(cls, data: object) -> Sandbox:
        d = data if isinstance(data, dict) else {}
        return cls(
            bwrap=d.get("bwrap") or None,
            works=bool(d.get("works")),
            why=str(d.get("why") or ""),
            root=bool(d.get("root")),
            sudo=bool(d.get("sudo")),
            userns=d.get("userns"),
            apt=bool(d.get("apt")),
            seccomp=bool(d.get("seccomp")),
            cgroups=bool(d.get("cgroups")),
            cgroups_why=str(d.get("cgroups_why") or ""),
            level=str(d.get("level") or "unsafe"),
        )

    @property
    def can_install(self) -> bool:
        return self.apt and (self.root or self.sudo)

    def summary(self) -> str:
        if self.works:
            if self.level == "strict":
                return f"ok ({self.bwrap}), isolation strict: {self.cgroups_why or 'cgroup caps per run'}"
            why = (
                "libseccomp2 is missing (apt-get install libseccomp2)"
                if not self.seccomp
                else f"memory is capped per process "
                f"({self.cgroups_why or 'no usable memory and pids cgroups'}; {cgroupdeleg.HOW_TO})"
            )
            # not "ok": a code recipe asks for strict isolation unless it says otherwise, and is refused here
            return (
                f"not strict ({self.bwrap}), isolation {self.level} at best: code recipes asking for "
                f"strict isolation (the default, as code_tests) are refused here; {why}"
            )
        if self.bwrap is None:
            how = "" if self.can_install else " (Debian's bubblewrap; installing needs root or sudo)"
            return f"unavailable: bwrap is not installed{how}; only code recipes need it"
        return f"unavailable: {self.why}; only code recipes need it"


@dataclass(frozen=True)
class Probe:
    """Facts about a host, gathered in one round trip by the host agent."""

    tmux: str | None  # "tmux 3.3a", None when missing
    gpus: tuple[str, ...]  # `nvidia-smi -L` lines; () on a host without GPU
    driver: str | None
    cuda: str | None
    python: str | None  # version of the host's python3 (the agent's interpreter, >= 3.8)
    uv: str | None
    free_disk_gb: float | None
    sandbox: Sandbox | None = None


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
    bwrap_installed: bool = False  # bubblewrap installed by this `up`
    alerts: AlertsSetup | None = None  # alerts from the host (pippa_ops.alerts), the idle watcher
    boot: str | None = None  # recovery at boot (provision.boot): installed|kept|removed|absent|unavailable
    health: dict[str, object] | None = None  # the passive `pippa doctor` result (pippa_contract.doctor)
    setup_none: bool = False  # the host entry has no setup (setup = []): nothing to be up to date

    def to_json(self) -> dict[str, object]:
        p = self.probe
        sb = p.sandbox
        return {
            "host": self.host,
            "remote_dir": self.remote_dir,
            "gpus": list(p.gpus),
            "driver": p.driver,
            "cuda": p.cuda,
            "python": self.python,
            "python3": p.python,
            "uv": p.uv,
            "uv_installed": self.uv_installed,
            "free_disk_gb": p.free_disk_gb,
            "tmux": p.tmux,
            "sandbox": None if sb is None else {**sb.__dict__, "installed_now": self.bwrap_installed},
            "synced_files": len(self.sync.sent),
            "setup_ran": self.setup_ran,
            "secrets_pushed": list(self.secrets.pushed),
            "secrets_missing": list(self.secrets.missing),
            "elapsed_s": round(self.elapsed_s, 2),
            "alerts": None if self.alerts is None else self.alerts.to_json(),
            "recover_on_boot": self.boot,
            "doctor": self.health,
        }


def parse_probe(answer: Mapping[str, object]) -> Probe:
    """The agent's ``probe`` answer as a Probe."""
    gpus = answer.get("gpus")
    free = answer.get("free_disk_gb")

    def opt(key: str) -> str | None:
        value = answer.get(key)
        return str(value) if value else None

    return Probe(
        tmux=opt("tmux"),
        gpus=tuple(str(g) for g in gpus) if isinstance(gpus, list) else (),
        driver=opt("driver"),
        cuda=opt("cuda"),
        python=opt("python"),
        uv=opt("uv"),
        free_disk_gb=float(free) if isinstance(free, int | float) else None,
        sandbox=Sandbox.from_json(answer.get("sandbox")),
    )


def probe(transport: Transport, spec: HostSpec) -> Probe:
    return parse_probe(verbs.probe(agent_client.Once(transport), spec.remote_dir))


def setup_lines(spec: HostSpec) -> tuple[str, ...]:
    """The host's setup: its own lines (``setup = []``: none), else the default uv sync."""
    return DEFAULT_SETUP if spec.setup is None else spec.setup


def uses_uv(lines: tuple[str, ...]) -> bool:
    """Whether a setup runs uv (only then does `up` install it)."""
    return any(_USES_UV.search(line) for line in lines)


def setup_key(spec: HostSpec, repo: Path) -> str:
    """What setup's result depends on: its lines and the project's dependency files."""
    h = hashlib.sha256("\n".join(setup_lines(spec)).encode())
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
            tail = [*tail[-39:], text]
            emit(text)
        status = proc.wait()
    if status != 0:
        # the line that says why (uv's `error:` above its `hint:` lines), as `ps` picks a run's reason
        last = reason_line(tail) or "no output"
        raise RemoteCommandFailed(f"{transport.name}: {what} failed with exit status {status}: {last}")


def up(
    spec: HostSpec,
    transport: Transport,
    repo: Path,
    *,
    emit: Emit = lambda _line: None,
    env_path: Path | None = None,
    connected: Callable[[], None] = lambda: None,
) -> UpReport:
    """Prepare the host; see the module docstring. ``emit`` receives progress lines for people;
    ``connected`` is called once the host answered its first probe (key verified, logged in)."""
    t0 = time.monotonic()
    facts = probe(transport, spec)
    connected()
    if facts.tmux is None:
        raise ToolMissing(f"{spec.name}: tmux is not installed on the host (sudo apt-get install tmux)")
    emit(f"gpus: {len(facts.gpus) or 'none'}; python3 {facts.python}; uv {facts.uv or 'missing'}")
    lines = setup_lines(spec)
    uv_installed = False
    if facts.uv is None and uses_uv(lines):
        emit("installing uv for the user (~/.local/bin)")
        answer = verbs.install_uv(agent_client.Once(transport))
        if not answer.get("uv"):
            why = "; ".join(str(f) for f in answer.get("failures") or []) or "no uv afterwards"
            raise ToolMissing(f"{spec.name}: could not install uv: {why}")
        facts = replace(facts, uv=str(answer["uv"]))
        uv_installed = True
    bwrap_installed = False
    if facts.sandbox is not None and not facts.sandbox.works and facts.sandbox.can_install:
        emit("installing bubblewrap (the code sandbox) with apt-get")
        bwrap = verbs.install_bwrap(agent_client.Once(transport))
        bwrap_installed = bool(bwrap.get("installed"))
        facts = replace(facts, sandbox=Sandbox.from_json(bwrap.get("sandbox")))
    if facts.sandbox is not None:
        emit(f"sandbox: {facts.sandbox.summary()}")
    synced = sync(spec, transport, repo, progress=None)
    emit(f"synced {len(synced.sent)} changed file(s) of {synced.files}")
    dir_expr = remote_dir_expr(spec.remote_dir)  # for local: the repo root, absolute
    record_path = f"{spec.remote_dir.rstrip('/')}/.pippa/setup.json"
    key = setup_key(spec, repo)
    recorded = _recorded_key(read_all(transport, record_path).decode(errors="replace"))
    setup_ran = bool(lines) and recorded != key
    if not lines:
        emit("setup: none (setup = [])")
    elif setup_ran:
        chained = " && ".join(f"( {line}\n)" for line in lines)
        emit(f"setup: {'; '.join(lines)}")
        line = f"{PATH_PREFIX} && {export_line(spec.env)} && cd {dir_expr} && {chained}"
        run_streamed(transport, line, emit, "setup")
        record = json.dumps({"key": key, "time": time.time()}) + "\n"
        verbs.write_file(agent_client.Once(transport), record_path, record)
    else:
        emit("setup: up to date")
    python = spec.python or f"{spec.remote_dir.rstrip('/')}/.venv/bin/python"
    py_expr = remote_dir_expr(python) if python.startswith(("~", "/")) else shlex.quote(python)
    r = transport.run(f"{py_expr} --version", timeout=30)
    if not r.ok:
        raise ToolMissing(f"{spec.name}: the training python {python} does not run: {r.stderr.strip()}")
    optional = (alerts.TARGET, HEARTBEAT)  # alerts and the dead-man's switch: pushed when set
    secrets = push_secrets(transport, spec.secrets, env_path or repo / ".env", optional=optional)
    from pippa_ops.provision.boot import apply_boot

    boot = apply_boot(spec, transport)
    if boot.message:
        emit(boot.message)
    remote_dir = str(repo) if spec.is_local else transport.expand(spec.remote_dir)
    health = dict(check_host(spec, transport, quick=True))  # the passive checks, stored on the host too
    alerts_setup = alerts.install(
        transport,
        spec,
        remote_dir=remote_dir,
        gpus=len(facts.gpus),
        python=python,
        configured=alerts.TARGET in secrets.pushed,
        heartbeat=HEARTBEAT in secrets.pushed,
    )
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
        bwrap_installed=bwrap_installed,
        alerts=alerts_setup,
        boot=boot.state,
        health=health,
        setup_none=not lines,
    )


def _recorded_key(text: str) -> str | None:
    try:
        value = json.loads(text).get("key")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
