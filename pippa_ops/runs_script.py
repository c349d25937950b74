"""Pure builders for what a launch writes on the host: run ids, ``--set`` items, cmd.sh, the session.

Everything here is a string built from validated names and quoted values, unit-tested without a host.
The wrapper (cmd.sh) is where the run's guarantees live:
- secrets come from the 0600 file, sourced inside the job's subshell; they never appear in cmd.sh,
  argv, tmux send-keys text, output.log or run.json;
- stdout+stderr go to ``output.log`` and to the pane (``tee -a -i``: the tee survives Ctrl-C so a
  trainer that catches SIGINT can still log while it saves);
- the wrapper traps SIGINT, so after an interrupt it still records ``exit_code`` (tmp + rename);
- a queued run of a sweep whose ``stop_requested`` exists exits without starting.
"""

from __future__ import annotations

import json
import re
import secrets as _secrets
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pippa_ops.errors import BadSetting
from pippa_ops.inventory import SECRETS_PATH
from pippa_ops.shell import SESSION_RE, export_line, sh_path, validate_name, validate_session

SET_KEY_RE = re.compile(r"^[a-z_][a-z0-9_.]*$")
DEFAULT_SESSION = "training"
DEFAULT_GAP_S = 10.0
# Exit status of the launch command when the session already exists (distinct from tmux's own 1).
SESSION_EXISTS_STATUS = 17


def new_run_id(label: str, now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<label>-<4 hex>`` (docs/CONTRACTS.md); ``label`` must already be a safe name."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    suffix = _secrets.token_hex(2)
    label = label[: 64 - len(stamp) - len(suffix) - 2]
    return validate_name("run", f"{stamp}-{label}-{suffix}")


def parse_sets(items: Sequence[str]) -> list[tuple[str, str]]:
    """``key=value`` items: keys ``^[a-z_][a-z0-9_.]*$``, values anything (quoted later)."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadSetting(f"bad --set {item!r}: use key=value (e.g. train.max_steps=10)")
        if not SET_KEY_RE.fullmatch(key):
            raise BadSetting(f"bad --set key {key!r}: use lowercase letters, digits, '_' and '.'")
        out.append((key, value))
    return out


@dataclass(frozen=True)
class Job:
    """One run of a launch: its id, what it runs, and the shell line (no secrets) that runs it."""

    run_id: str
    recipe: str | None
    command: str  # the job's shell line, as written into cmd.sh and run.json
    argv: tuple[str, ...] | None  # the argument list when pippa built it (recipe runs)


def python_words(python: str | None, remote_dir: str) -> list[str]:
    """How the host runs Python: the host's ``python`` setting (may be several words) or the venv."""
    if python:
        words = shlex.split(python)
        return [sh_path(words[0]), *(shlex.quote(w) for w in words[1:])]
    return [sh_path(remote_dir.rstrip("/") + "/.venv/bin/python")]


def recipe_job(
    run_id: str, recipe: str, python: str | None, remote_dir: str, sets: Sequence[tuple[str, str]]
) -> Job:
    """``<python> -m training_core.train RECIPE --run-dir <abs run dir> [--set k=v ...]``."""
    validate_name("recipe", recipe)
    argv = ["-m", "training_core.train", recipe, "--run-dir"]
    tail: list[str] = []
    for key, value in sets:
        tail += ["--set", f"{key}={value}"]
    run_dir = sh_path(f"{remote_dir.rstrip('/')}/runs/{run_id}")
    line = " ".join([*python_words(python, remote_dir), *(shlex.quote(a) for a in argv), run_dir])
    if tail:
        line += " " + shlex.join(tail)
    shown = ["python", *argv, f"runs/{run_id}", *tail]
    return Job(run_id=run_id, recipe=recipe, command=line, argv=tuple(shown))


def cmd_job(run_id: str, command: str) -> Job:
    if not command.strip():
        raise BadSetting("--cmd needs a command")
    return Job(run_id=run_id, recipe=None, command=command, argv=None)


def render_cmd_sh(job: Job, remote_dir: str, env: dict[str, str]) -> str:
    """The wrapper the session runs for one job (see the module docstring for its guarantees)."""
    run_dir = sh_path(f"{remote_dir.rstrip('/')}/runs/{job.run_id}")
    return f"""#!/bin/sh
# pippa run {job.run_id}: written by pippa at launch. Holds no secrets: they are sourced from
# {SECRETS_PATH} (mode 0600) inside the job's subshell.
RUN_DIR={run_dir}
[ -e "$RUN_DIR/stop_requested" ] && exit 0
date +%s > "$RUN_DIR/started"
trap : INT
{{
  trap : INT
  (
    cd {sh_path(remote_dir)} || exit 1
    export PATH="$HOME/.local/bin:$PATH" PYTHONUNBUFFERED=1
    export PIPPA_RUN_ID={shlex.quote(job.run_id)} PIPPA_RUN_DIR="$RUN_DIR"
    {export_line(env)}
    if [ -f {sh_path(SECRETS_PATH)} ]; then set -a; . {sh_path(SECRETS_PATH)}; set +a; fi
{job.command}
  )
  echo $? > "$RUN_DIR/exit_code.tmp"
}} 2>&1 | tee -a -i "$RUN_DIR/output.log"
[ -f "$RUN_DIR/exit_code.tmp" ] && mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"
exit 0
"""


def run_json(
    job: Job,
    *,
    session: str,
    host: str,
    started: float,
    sync: dict[str, object] | None,
    sweep_index: int,
    sweep_size: int,
) -> str:
    return json.dumps(
        {
            "run_id": job.run_id,
            "session": session,
            "host": host,
            "recipe": job.recipe,
            "command": job.command,
            "argv": list(job.argv) if job.argv is not None else None,
            "started": started,
            "sync": sync,
            "sweep_index": sweep_index,
            "sweep_size": sweep_size,
        }
    )


def session_argv(remote_dir: str, run_ids: Sequence[str], gap_s: float) -> list[str]:
    """What the tmux session execs: each run's cmd.sh in turn, ``gap_s`` apart, failures not stopping it.

    The outer shell traps SIGINT so Ctrl-C reaches the job without killing the session (and with it
    the trainer's chance to save); ``pippa stop`` ends the rest of a sweep through stop_requested.
    """
    base = remote_dir.rstrip("/") + "/runs/"
    steps = [f"sh {sh_path(base + rid + '/cmd.sh')}" for rid in run_ids]
    gap = f"; sleep {float(gap_s):g}; " if gap_s > 0 else "; "
    return ["sh", "-c", "trap : INT; " + gap.join(steps)]


def launch_script(
    *,
    session: str,
    remote_dir: str,
    files: Sequence[tuple[str, str, str]],  # (run_id, run.json text, cmd.sh text)
    tmux_argv: Sequence[str],
    replace: bool,
    stamp: float,
    prelude: Sequence[str] = (),
) -> str:
    """ONE remote command: check tmux, refuse or replace the session, write the run dirs, start it.
    ``prelude``: shell lines built elsewhere (already quoted) run first, e.g. the sync marker write."""
    validate_session(session)
    assert SESSION_RE.fullmatch(session)
    runs = sh_path(remote_dir.rstrip("/") + "/runs")
    lines = [*prelude, "command -v tmux >/dev/null 2>&1 || { echo 'tmux: not found' >&2; exit 127; }"]
    # --replace: the old session is renamed aside and killed only once the new one exists. Killing it
    # first could stop the tmux server (its last session) and a new server numbers sessions from $0
    # again, so a new session created within the same second would carry the old run's identity.
    old = f"{session}-replaced-{int(stamp)}"
    if replace:
        # Record how the replaced runs ended before their session goes.
        lines.append(
            f"old=; if tmux has-session -t ={session} 2>/dev/null; then "
            f'for d in {runs}/*/; do [ -e "$d/exit_code" ] && continue; '
            f'grep -q \'"session": "{session}"\' "$d/run.json" 2>/dev/null && '
            f'echo {int(stamp)} > "$d/stop_requested"; done; '
            f"tmux rename-session -t ={session} {old}; old=1; fi"
        )
    else:
        lines.append(
            f"if tmux has-session -t ={session} 2>/dev/null; then "
            f"echo 'session {session} exists' >&2; exit {SESSION_EXISTS_STATUS}; fi"
        )
    for run_id, meta, script in files:
        validate_name("run", run_id)
        d = sh_path(remote_dir.rstrip("/") + f"/runs/{run_id}")
        lines.append(f"mkdir -p {d}")
        lines.append(f"printf '%s\\n' {shlex.quote(meta)} > {d}/run.json")
        lines.append(f"printf '%s' {shlex.quote(script)} > {d}/cmd.sh")
    if replace:  # a failed start still ends the replaced session, as asked
        kill_old = f"tmux kill-session -t ={old} 2>/dev/null || true"
        lines.append(f'ident=$({shlex.join(tmux_argv)}) || {{ [ -z "$old" ] || {kill_old}; exit 1; }}')
        lines.append(f'[ -z "$old" ] || {kill_old}')
    else:
        lines.append(f"ident=$({shlex.join(tmux_argv)})")  # new-session -P prints the session's identity
    for run_id, _, _ in files:
        lines.append(
            f"printf '%s\\n' \"$ident\" > {sh_path(remote_dir.rstrip('/') + f'/runs/{run_id}')}/tmux_session"
        )
    return "set -e\n" + "\n".join(lines)
