"""A run's restart policy: ``pippa run --retry N --stall-timeout 20m`` over a recipe's ``[restart]`` table.

The policy travels in run.json (``"restart"``) and is carried out on the host by the host supervisor
(``pippa_agent.supervise``, which reads it with ``attempts.policy_of``), so it holds while the laptop
sleeps.
A run without one is started exactly as before (no supervisor process).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pippa_contract import attempts
from pippa_ops.errors import BadSetting

_DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
RESTART_KEYS = ("max_attempts", "stall_timeout", "retry_diverged", "backoff", "infra_retries", "on_oom")
INFRA_RETRIES = attempts.INFRA_RETRIES
ON_OOM = ("halve", "fail")


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """``"20m"``, ``"90s"``, ``"1.5h"``, ``"500ms"`` or a number of seconds, as seconds (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        m = _DURATION_RE.fullmatch(str(text).strip())
        if m is None:
            raise BadSetting(f"bad {what} {text!r}: use e.g. 90s, 20m, 2h")
        seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    if seconds <= 0:
        raise BadSetting(f"bad {what} {text!r}: it must be more than 0")
    return seconds


@dataclass(frozen=True)
class RestartPolicy:
    """What the host supervisor does when an attempt ends badly (see ``pippa_agent.supervise``)."""

    max_attempts: int = 1  # the first attempt plus the retries (--retry N: N + 1)
    stall_timeout_s: float | None = None  # no new metrics line for this long after a step: a hang
    stall_off: bool = False  # --stall-timeout off: no stall watch at all
    watched: bool = False  # a recipe run: the stall watch derived from its step times (pippa_contract.stall)
    infra_retries: int = INFRA_RETRIES  # lost / nccl / stalled attempts retried without spending --retry
    on_oom: str = "halve"  # an OOM: retry with half the per-device batch ("fail": a crash like any other)
    retry_diverged: bool = False  # a NaN/inf loss or reward would diverge again from the same checkpoint
    backoff_s: float = attempts.BACKOFF_S  # the first wait before a retry; doubles, capped
    grace_s: float = 180.0  # after a stall's SIGINT: the time to save before SIGKILL (pippa stop's grace)
    failover: tuple[str, ...] = ()  # --failover: hosts a gpu-fault or lost host moves it to (moving.failover)
    budget: float | None = None  # --budget "$300": the most it may spend, at the host's price (ledger)

    @property
    def active(self) -> bool:
        """Whether the run needs a supervisor at all."""
        return (
            self.max_attempts > 1
            or self.budget is not None
            or (not self.stall_off and (self.stall_timeout_s is not None or self.watched))
        )

    def to_json(self) -> dict[str, Any]:
        """run.json's ``restart``, as ``attempts.policy_of`` reads it."""
        return {
            "max_attempts": self.max_attempts,
            "stall_timeout_s": "off" if self.stall_off else self.stall_timeout_s,  # None: derived
            "infra_retries": self.infra_retries,
            "on_oom": self.on_oom,
            "retry_diverged": self.retry_diverged,
            "backoff_s": self.backoff_s,
            "backoff_cap_s": attempts.BACKOFF_CAP_S,
            "grace_s": self.grace_s,
            **({"failover": list(self.failover)} if self.failover else {}),
            **({"budget": self.budget} if self.budget is not None else {}),
        }


def recipe_restart(path: Path) -> RestartPolicy:
    """A recipe's ``[restart]`` table (max_attempts, stall_timeout, retry_diverged, backoff)."""
    try:
        table = tomllib.loads(path.read_text()).get("restart") or {}
    except (OSError, tomllib.TOMLDecodeError):
        return RestartPolicy()  # the trainer reports a broken recipe in its own words
    if not isinstance(table, dict):
        raise BadSetting(f"{path.name}: [restart] must be a table")
    unknown = sorted(set(table) - set(RESTART_KEYS))
    if unknown:
        known = ", ".join(RESTART_KEYS)
        raise BadSetting(f"{path.name}: unknown [restart] key {unknown[0]!r}; known: {known}")
    policy = RestartPolicy()
    if "max_attempts" in table:
        n = table["max_attempts"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadSetting(f"{path.name}: [restart] max_attempts must be a whole number >= 1")
        policy = replace(policy, max_attempts=n)
    if "stall_timeout" in table:
        policy = replace(policy, stall_timeout_s=parse_duration(table["stall_timeout"], "stall_timeout"))
    if "retry_diverged" in table:
        policy = replace(policy, retry_diverged=bool(table["retry_diverged"]))
    if "backoff" in table:
        policy = replace(policy, backoff_s=parse_duration(table["backoff"], "backoff"))
    if "infra_retries" in table:
        policy = replace(
            policy, infra_retries=_count(table["infra_retries"], f"{path.name}: [restart] infra_retries")
        )
    if "on_oom" in table:
        policy = replace(policy, on_oom=_on_oom(table["on_oom"], f"{path.name}: [restart] on_oom"))
    return policy


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadSetting(f"bad {what} {value!r}: use 0 or more")
    return value


def _on_oom(value: object, what: str) -> str:
    if value not in ON_OOM:
        raise BadSetting(f"bad {what} {value!r}: use halve or fail")
    return str(value)


def resolve_policy(
    base: RestartPolicy,
    *,
    retry: int | None = None,
    stall_timeout: str | None = None,
    retry_diverged: bool | None = None,
    backoff: str | None = None,
    infra_retries: int | None = None,
    on_oom: str | None = None,
    failover: tuple[str, ...] = (),
    budget: str | None = None,
) -> RestartPolicy:
    """The recipe's policy with the command line's flags over it (a flag wins)."""
    policy = base
    if budget is not None:
        from pippa_contract.ledger import parse_budget

        try:
            policy = replace(policy, budget=parse_budget(budget))
        except ValueError as e:
            raise BadSetting(f"bad --budget: {e}") from e
    if retry is not None:
        if retry < 0:
            raise BadSetting(f"bad --retry {retry}: use 0 or more")
        policy = replace(policy, max_attempts=retry + 1)
    if stall_timeout is not None and stall_timeout.strip().lower() == "off":
        policy = replace(policy, stall_timeout_s=None, stall_off=True)
    elif stall_timeout is not None:
        policy = replace(
            policy, stall_timeout_s=parse_duration(stall_timeout, "--stall-timeout"), stall_off=False
        )
    if retry_diverged is not None:
        policy = replace(policy, retry_diverged=retry_diverged)
    if backoff is not None:
        policy = replace(policy, backoff_s=parse_duration(backoff, "--backoff"))
    if infra_retries is not None:
        policy = replace(policy, infra_retries=_count(infra_retries, "--infra-retries"))
    if on_oom is not None:
        policy = replace(policy, on_oom=_on_oom(on_oom, "--on-oom"))
    if failover:
        policy = replace(policy, failover=failover)
    return policy


@dataclass(frozen=True)
class RestartFlags:
    """``pippa run``'s restart flags (None: not given, the recipe's ``[restart]`` or the default holds)."""

    retry: int | None = None
    stall_timeout: str | None = None
    retry_diverged: bool | None = None
    backoff: str | None = None
    infra_retries: int | None = None
    on_oom: str | None = None
    failover: tuple[str, ...] = ()
    budget: str | None = None  # --budget "$300"

    @property
    def given(self) -> bool:
        flags = (
            self.retry,
            self.stall_timeout,
            self.retry_diverged,
            self.backoff,
            self.infra_retries,
            self.on_oom,
        )
        return bool(self.failover) or self.budget is not None or any(v is not None for v in flags)

    def policy_for(self, recipe: str | None, recipes_dir: Path) -> RestartPolicy:
        """The policy of one run: the recipe's ``[restart]`` (none for ``--cmd``) under these flags. A
        recipe run is always watched for stalls (unless ``--stall-timeout off``)."""
        base = RestartPolicy()
        if recipe is not None:
            base = replace(recipe_restart(recipes_dir / f"{recipe}.toml"), watched=True)
        return resolve_policy(
            base,
            retry=self.retry,
            stall_timeout=self.stall_timeout,
            retry_diverged=self.retry_diverged,
            backoff=self.backoff,
            infra_retries=self.infra_retries,
            on_oom=self.on_oom,
            failover=self.failover,
            budget=self.budget,
        )
