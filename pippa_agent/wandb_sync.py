"""W&B: upload a run's offline W&B runs from the host, the API key from the secrets file."""

from __future__ import annotations

import os

from pippa_agent.host import AgentError, ErrorKind, host_path, last_line, search_path
from pippa_contract import rundir as rd
from pippa_contract.secrets import parse_secrets

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import WandbSyncAnswer, WandbSyncRequest


def secrets_env(path: str) -> dict[str, str]:
    """The host's secrets file (written by `pippa up`) as a dict; empty without one."""
    try:
        with open(host_path(path)) as f:
            return parse_secrets(f.read())
    except OSError:
        return {}


def wandb_sync(req: WandbSyncRequest) -> WandbSyncAnswer:
    """Upload a run's offline W&B runs with ``wandb sync``, the API key from the secrets file (never
    argv). The host's python runs it (``python`` argv), in ``remote_dir`` (``uv run`` finds its project)."""
    run_dir = host_path(req["run_dir"])
    moved = os.path.join(run_dir, rd.MOVED_TO)
    if os.path.exists(moved):  # a stale copy: what it logged after the move must never reach the W&B run
        with open(moved) as f:
            to = f.read().strip() or "another host"
        raise AgentError(
            ErrorKind.USAGE,
            f"{run_dir} moved to {to}: its W&B run goes on there, so this copy's offline "
            f"W&B runs are never synced (sync the run on {to})",
        )
    base = os.path.join(run_dir, "wandb")
    try:
        found = sorted(n for n in os.listdir(base) if n.startswith("offline-run-"))
    except OSError:
        found = []
    if not found:
        raise AgentError(
            ErrorKind.NOT_FOUND, f"no offline W&B run in {run_dir} (the run had W&B online or off)"
        )
    env = {**secrets_env(req["secrets_path"]), **(req.get("env") or {})}
    env.pop("PIPPA_NOTIFY", None)  # only the alerts delivery reads the target (docs/CONTRACTS.md)
    if not (env.get("WANDB_API_KEY") or os.environ.get("WANDB_API_KEY")):
        raise AgentError(
            ErrorKind.USAGE, "no WANDB_API_KEY on the host: put it in .env, then `pippa up` pushes it"
        )
    python = list(req["python"])
    if python[0].startswith("~"):
        python[0] = host_path(python[0])
    argv = [*python, "-m", "wandb", "sync", *(os.path.join(base, n) for n in found)]
    import subprocess

    timeout = float(req.get("timeout", 600))
    try:
        p = subprocess.run(
            argv,
            cwd=host_path(req["remote_dir"]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "PATH": search_path(), **env},
        )
    except FileNotFoundError:
        why = f"{python[0]} not found on the host (pippa up installs it)"
        raise AgentError(ErrorKind.TOOL_MISSING, why) from None
    except subprocess.TimeoutExpired as e:
        said = last_line(subprocess.CompletedProcess(argv, 124, e.stdout or b"", e.stderr or b""))
        why = f"wandb sync did not finish within {timeout:g}s ({said})"
        return {"synced": found, "status": 124, "why": why}
    return {"synced": found, "status": p.returncode, "why": "" if p.returncode == 0 else last_line(p)}
