"""Hosts: inventory entries, ~/.ssh/config aliases, bare addresses, and the host ``local``.

Two inventory files: ``pippa.toml`` at the repo root (team hosts, committed; ``$PIPPA_INVENTORY``
names another file, which the tests use) and ``~/.config/pippa/hosts.toml`` (personal). For one
host name, how to reach it (address, user, port, identity_file, proxy_jump) comes from the user's
own files first: hosts.toml > ~/.ssh/config (an alias of that name) > pippa.toml; the other fields
from hosts.toml > pippa.toml. ``HostSpec.origins`` records where each field came from. Both files
hold ``[hosts.NAME]`` tables with the HostSpec fields.
``resolve`` turns whatever the user typed into a HostSpec, or raises UnknownHost with what is known.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pippa_ops.alerts.settings import FIELDS as ALERT_FIELDS
from pippa_ops.alerts.settings import alert_settings
from pippa_ops.errors import UnknownHost, UsageError, did_you_mean
from pippa_ops.hosts.keys import known_only
from pippa_ops.hosts.scheduler import SlurmSpec, scheduler_setting
from pippa_ops.repo import fallback_root, team_inventory_path
from pippa_ops.transport.shell import NAME_RE, validate_env_key
from pippa_ops.transport.sshconfig import (
    SSHConfigProvider,
    SSHConfigSource,
    read_ssh_config,
    ssh_aliases,
    ssh_config_path,
)
from pippa_ops.transport.sshconfig import known_hosts_path as known_hosts_path  # re-exported
from pippa_ops.transport.sshconfig import ssh_dir as ssh_dir  # re-exported

if TYPE_CHECKING:
    pass

DEFAULT_REMOTE_DIR = "~/pippa"
DEFAULT_SECRETS = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "HF_TOKEN")
LOCAL = "local"


@dataclass(frozen=True)
class HostSpec:
    """Everything pippa needs to reach a host and run the training code there."""

    name: str  # how the user named it (inventory key, ssh alias, address, or "local")
    address: str | None = None  # hostname/IP to connect to; None for local
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None
    remote_dir: str = DEFAULT_REMOTE_DIR  # for local: the repo root itself (no copy)
    python: str | None = None  # how the host runs training code; None: <remote_dir>/.venv/bin/python
    # Shell lines `up` runs after sync; None: provision.prep.DEFAULT_SETUP (uv sync --locked ...).
    setup: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra non-secret variables (HF_HOME, ...)
    secrets: tuple[str, ...] = DEFAULT_SECRETS  # names pushed from the local .env
    # "tmux" (runs in tmux sessions) or "slurm" (a login node: runs are sbatch jobs, hosts.scheduler)
    scheduler: str = "tmux"
    slurm: SlurmSpec | None = None  # the [hosts.NAME.slurm] table; None unless scheduler = "slurm"
    recover_on_boot: bool = False  # `pippa up` installs an @reboot crontab line resuming lost runs
    source: str = "address"  # "inventory:<file>", "ssh_config", "address", "local"
    # Where each set field came from: "hosts.toml", "ssh_config" or "pippa.toml" (`pippa hosts --explain`).
    origins: dict[str, str] = field(default_factory=dict)
    # Alerts and cost (pippa_ops.alerts.settings): the idle-GPU watcher's period ("20m"; None: off) and
    # threshold (% utilization), the host's price per hour, or per GPU-hour (None: no cost shown).
    idle_alert: str | None = None
    idle_threshold: float = 5.0
    cost_per_hour: float | None = None
    cost_per_gpu_hour: float | None = None
    currency: str = "$"  # the rate's unit: an ISO code ("USD", "EUR") or a symbol (runs.records.cost.money)
    gpus: int | None = None  # how many GPUs the box should have (`pippa doctor` fails it with fewer)
    # The dead-man's switch (PIPPA_HEARTBEAT): ping period while a run makes progress ("60s"; None: 60 s),
    # and "always" to ping while no run goes on too.
    heartbeat_every: str | None = None
    heartbeat: str | None = None
    # The meter that stops itself: the command the host's watcher runs (once per trigger) when one of
    # stop_when ("done", "stalled", "idle:30m") says so, stop_notice ("5m") after the alert that arms it.
    stop: str | None = None
    stop_when: tuple[str, ...] = ()
    stop_notice: str | None = None
    daily_budget: float | None = None  # the most the host's runs may spend a day (its currency; the ledger)

    @property
    def idle_alert_s(self) -> float | None:
        from pippa_contract.alerts import parse_duration

        return parse_duration(self.idle_alert) if self.idle_alert else None

    @property
    def heartbeat_every_s(self) -> float | None:
        from pippa_contract.alerts import parse_duration

        return parse_duration(self.heartbeat_every) if self.heartbeat_every else None

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL


_ADDRESS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,253}$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_STR_FIELDS = ("address", "user", "identity_file", "proxy_jump", "remote_dir", "python")
_FIELDS = (
    *_STR_FIELDS,
    "port",
    "setup",
    "env",
    "secrets",
    "scheduler",
    "slurm",
    *ALERT_FIELDS,
    "recover_on_boot",
    "gpus",
)
# How to reach a host. For these, the user's own files win over the team's: personal hosts.toml >
# ~/.ssh/config > team pippa.toml (a team entry never overrides the user's ssh alias of that name).
# The other fields (remote_dir, python, setup, env, secrets): hosts.toml > pippa.toml.
CONNECTION_FIELDS = ("address", "user", "port", "identity_file", "proxy_jump")
PERSONAL, SSH_CONFIG, TEAM = "hosts.toml", "ssh_config", "pippa.toml"


def personal_inventory_path() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "pippa" / "hosts.toml"


def load_ssh_config(addresses: tuple[str, ...] = ()) -> SSHConfigSource:
    """~/.ssh/config: from the connection keeper when one answers (so a warm command never imports
    asyncssh's reader), else read here (``local`` never needs it). ``addresses``: what the keeper looks up in
    the same answer (a host's endpoint looks up its address)."""
    from pippa_ops.transport import reuse

    if reuse.requested():
        provider: SSHConfigProvider = reuse.keeper()
        kept = provider.ssh_config(addresses)
        if kept is not None:
            return kept
    return read_ssh_config()


def _read_file(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read inventory {path}: {e}") from e
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        raise UsageError(f"{path}: [hosts] must be a table of [hosts.NAME] tables")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in hosts.items():
        if not NAME_RE.fullmatch(name) or name == LOCAL:
            raise UsageError(f"{path}: invalid host name {name!r}")
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: hosts.{name} must be a table")
        out[name] = {**known_only(entry, _FIELDS, f"{path}: hosts.{name}"), "_file": str(path)}
    return out


def _spec_from_entry(name: str, entry: Mapping[str, Any]) -> HostSpec:
    where = f"{entry['_file']}: hosts.{name}"

    def text(key: str) -> str | None:
        value = entry.get(key)
        if value is not None and not (isinstance(value, str) and value):
            raise UsageError(f"{where}.{key} must be a non-empty string")
        return value

    port = entry.get("port")
    if port is not None and not (isinstance(port, int) and 0 < port < 65536):
        raise UsageError(f"{where}.port must be a port number")
    setup = entry.get("setup")
    if isinstance(setup, str):
        setup = [setup]
    if setup is not None and not (isinstance(setup, list) and all(isinstance(x, str) for x in setup)):
        raise UsageError(f"{where}.setup must be a string or a list of strings")
    env = entry.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise UsageError(f"{where}.env must be a table of strings")
    for key in env:
        validate_env_key(key)
    secrets = entry.get("secrets", list(DEFAULT_SECRETS))
    if not (isinstance(secrets, list) and all(isinstance(x, str) for x in secrets)):
        raise UsageError(f"{where}.secrets must be a list of variable names")
    for key in secrets:
        validate_env_key(key)
    address = text("address") or name
    _check_address(address, where)
    user = text("user")
    if user is not None and not _USER_RE.fullmatch(user):
        raise UsageError(f"{where}.user: invalid user name {user!r}")
    scheduler, slurm = scheduler_setting(entry, where)
    recover_on_boot = entry.get("recover_on_boot", False)
    if not isinstance(recover_on_boot, bool):
        raise UsageError(f"{where}.recover_on_boot must be true or false")
    gpus = entry.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 64):
        raise UsageError(f"{where}.gpus must be a number of GPUs (0 to 64)")
    return HostSpec(
        name=name,
        address=address,
        user=user,
        port=port,
        scheduler=scheduler,
        slurm=slurm,
        identity_file=text("identity_file"),
        proxy_jump=text("proxy_jump"),
        remote_dir=text("remote_dir") or DEFAULT_REMOTE_DIR,
        python=text("python"),
        setup=tuple(setup) if setup is not None else None,
        env=dict(env),
        secrets=tuple(secrets),
        recover_on_boot=recover_on_boot,
        gpus=gpus,
        source=f"inventory:{entry['_file']}",
        **alert_settings(entry, where),
    )


def _check_address(address: str, where: str) -> None:
    if not _ADDRESS_RE.fullmatch(address):
        raise UsageError(f"{where}: invalid address {address!r}")


def ssh_alias_fields(config: SSHConfigSource, alias: str) -> dict[str, Any]:
    """The connection fields ~/.ssh/config sets for ``alias`` (only those it sets)."""
    found = config.lookup(alias)
    out: dict[str, Any] = {}
    out["address"] = found.get("hostname", alias)
    if found.get("user"):
        out["user"] = found["user"]
    if found.get("port"):
        out["port"] = int(found["port"])
    if found.get("identityfile"):
        out["identity_file"] = found["identityfile"][0]
    if found.get("proxyjump") and found["proxyjump"] != "none":
        out["proxy_jump"] = found["proxyjump"]
    return out


def merge_entry(
    team: Mapping[str, Any], ssh: Mapping[str, Any], personal: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """One host's fields by the documented rule (see CONNECTION_FIELDS), and where each came from."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key in _FIELDS:
        order = [(PERSONAL, personal), (SSH_CONFIG, ssh), (TEAM, team)]
        if key not in CONNECTION_FIELDS:
            order = [(PERSONAL, personal), (TEAM, team)]
        for origin, entry in order:
            if key in entry:
                merged[key] = entry[key]
                origins[key] = origin
                break
    merged["_file"] = personal.get("_file") or team.get("_file") or str(ssh_config_path())
    return merged, origins


def load_inventory(repo: Path | None = None) -> dict[str, HostSpec]:
    """The inventory hosts (team and personal files), merged by the rule of CONNECTION_FIELDS."""
    team = _read_file(team_inventory_path(repo))
    personal = _read_file(personal_inventory_path())
    names = sorted(set(team) | set(personal))
    addresses = tuple(dict.fromkeys(str(e.get("address", n)) for f in (team, personal) for n, e in f.items()))
    config = load_ssh_config(addresses) if names and ssh_config_path().is_file() else None
    aliases = set(ssh_aliases(config)) if config is not None else set()
    out = {}
    for name in names:
        ssh = ssh_alias_fields(config, name) if config is not None and name in aliases else {}
        entry, origins = merge_entry(team.get(name, {}), ssh, personal.get(name, {}))
        out[name] = replace(_spec_from_entry(name, entry), origins=origins)
    return out


def default_host() -> str:
    """Where ``pippa run`` goes without ``--host``: ``default_host`` at the top of the personal
    hosts.toml, else ``local`` (this machine)."""
    path = personal_inventory_path()
    if not path.is_file():
        return LOCAL
    try:
        value = tomllib.loads(path.read_text()).get("default_host", LOCAL)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e}") from e
    if not isinstance(value, str) or not value:
        raise UsageError(f"{path}: default_host must be a host name")
    return value


def local_spec(repo: Path | None = None) -> HostSpec:
    """The host ``local``: this machine, the project root itself as remote_dir (no copy)."""
    # W&B stays offline for the main job here unless a run asks for it (training_core.run.wandb_start)
    return HostSpec(
        name=LOCAL,
        remote_dir=str(repo or fallback_root()),
        source="local",
        env={"PIPPA_WANDB_DEFAULT": "offline"},
    )


def alias_spec(config: SSHConfigSource, name: str) -> HostSpec:
    """A host known only as an alias of ~/.ssh/config."""
    fields = ssh_alias_fields(config, name)
    return HostSpec(
        name=name,
        address=fields.get("address", name),
        user=fields.get("user"),
        port=fields.get("port"),
        identity_file=fields.get("identity_file"),
        proxy_jump=fields.get("proxy_jump"),
        source="ssh_config",
        origins=dict.fromkeys(fields, SSH_CONFIG),
    )


def split_port(text: str) -> tuple[str, int | None]:
    """``1.2.3.4:2222`` -> (``1.2.3.4``, 2222); ``[::1]:2222`` or ``[::1]`` -> (``::1``, ...); a bare
    IPv6 address (several colons) or a name has no port."""
    if text.startswith("["):
        inner, sep, tail = text[1:].partition("]")
        if sep and (not tail or (tail.startswith(":") and tail[1:].isdigit())):
            return inner, int(tail[1:]) if tail else None
        return text, None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        if port.isdigit() and 0 < int(port) < 65536:
            return host, int(port)
    return text, None


def resolve(name: str, repo: Path | None = None) -> HostSpec:
    """Inventory entry, ssh alias, ``user@address`` or bare address, or ``local``; else UnknownHost."""
    if name == LOCAL:
        return local_spec(repo)
    inventory = load_inventory(repo)
    if name in inventory:
        return inventory[name]
    config = load_ssh_config()
    aliases = ssh_aliases(config)
    if name in aliases:
        return alias_spec(config, name)
    user, _, rest = name.rpartition("@")
    address, port = split_port(rest)
    looks_like_address = bool(user) or "." in address or ":" in address or address == "localhost"
    valid = _ADDRESS_RE.fullmatch(address) or _IPV6_RE.fullmatch(address)
    if looks_like_address and valid and (not user or _USER_RE.fullmatch(user)):
        return HostSpec(name=name, address=address, user=user or None, port=port, source="address")
    known = list(dict.fromkeys([LOCAL, *inventory, *aliases]))
    raise UnknownHost(
        f"unknown host {name!r}{did_you_mean(name, known)}: not in the inventory (pippa.toml, "
        "~/.config/pippa/hosts.toml), "
        f"not an alias in ~/.ssh/config, not an address; known: {', '.join(known)}"
    )
