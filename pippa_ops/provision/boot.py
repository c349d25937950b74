"""Recovery at boot: a host entry's ``recover_on_boot = true`` makes ``pippa up`` install ONE ``@reboot``
line in the host user's crontab; ``pippa up`` removes it when the setting goes.

The line runs the host program's recovery (``recover REMOTE_DIR``, pippa_agent.supervise.recover),
through the link ``~/.local/share/pippa/agent.pyz`` to the version `pippa up` installed; it starts
again each lost run of that directory with attempts left, so a rebooted host continues on its own.
The line carries a marker naming the directory, so several projects on one host each keep their own
and other lines are kept.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pippa_contract import verbs
from pippa_contract.hostdirs import BOOT_PROGRAM, LEGACY_SUPERVISOR
from pippa_ops.errors import BadSetting
from pippa_ops.hosts.inventory import HostSpec
from pippa_ops.transport import agent_client
from pippa_ops.transport.base import Transport
from pippa_ops.transport.shell import sh_path

MARK = "# pippa recover_on_boot"
NO_CRONTAB = 127  # the shell's "command not found"


@dataclass(frozen=True)
class BootChange:
    state: str  # installed | kept | removed | absent | unavailable
    message: str  # one line for people


def boot_line(remote_dir: str) -> str:
    """The crontab line for ``remote_dir`` (pure): cron's shell expands ``~``; the rest is quoted, and a
    line break (which would start another crontab line) is refused."""
    if any(ord(c) < 32 for c in remote_dir):
        raise BadSetting(f"remote_dir {remote_dir!r} has a control character: no @reboot line for it")
    return (
        f"@reboot python3 -S -I {BOOT_PROGRAM} recover {shlex.quote(remote_dir)} "
        f"{MARK} {shlex.quote(remote_dir)}"
    )


def edit_crontab(current: str, remote_dir: str, enable: bool) -> str:
    """``current`` without this directory's line, plus the line when ``enable`` (pure)."""
    mark = f"{MARK} {shlex.quote(remote_dir)}"
    lines = [ln for ln in current.splitlines() if not ln.rstrip().endswith(mark)]
    if enable:
        lines.append(boot_line(remote_dir))
    return "".join(f"{ln}\n" for ln in lines)


def apply_boot(spec: HostSpec, transport: Transport) -> BootChange:
    """Make the host's crontab hold this directory's @reboot line iff ``spec.recover_on_boot``."""
    listed = transport.run(["crontab", "-l"], timeout=30)
    if listed.exit_status == NO_CRONTAB or "not found" in listed.stderr:
        if spec.recover_on_boot:
            return BootChange("unavailable", f"recovery at boot is not available on {spec.name}: no crontab")
        return BootChange("absent", "")
    current = listed.stdout if listed.ok else ""  # "no crontab for user": exit 1, nothing listed
    wanted = edit_crontab(current, spec.remote_dir, spec.recover_on_boot)
    if spec.recover_on_boot:
        verbs.link_program(agent_client.Once(transport), BOOT_PROGRAM, agent_client.digest(), "boot")
        # an earlier version's @reboot program (its line is replaced below: same marker)
        transport.run(f"rm -f {sh_path(LEGACY_SUPERVISOR)}", timeout=30)
    if wanted == current or (not wanted.strip() and not current.strip()):
        kept = "kept" if spec.recover_on_boot else "absent"
        return BootChange(
            kept, "recovery at boot: on (@reboot line in crontab)" if spec.recover_on_boot else ""
        )
    transport.run(["crontab", "-"], input=wanted.encode(), timeout=30, check=True)
    if spec.recover_on_boot:
        return BootChange("installed", "recovery at boot: installed an @reboot line in the user's crontab")
    return BootChange("removed", "recovery at boot: removed the @reboot line from the user's crontab")
