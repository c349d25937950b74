"""A supervised run's restart policy (run.json's ``restart``) and its attempts (``attempts.json``,
docs/CONTRACTS.md): read by the host supervisor (pippa_agent.supervise) and by the laptop (``ps``,
``pippa recover``, the restart flags' defaults)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BACKOFF_S = 30.0  # the first wait before a retry; it doubles per attempt ...
BACKOFF_CAP_S = 600.0  # ... up to this
GRACE_S = 180.0  # a stalled attempt's time to save after SIGINT, before SIGKILL
INFRA_RETRIES = 3  # lost / nccl / stalled attempts retried without spending max_attempts
USAGE_EXIT = 2  # training_core's exit code for a bad recipe or setting: a retry would fail the same way

# Outcomes of an attempt (``attempts[i]["outcome"]``).
RUNNING, COMPLETED, FAILED, STALLED, DIVERGED, STOPPED, LOST = (
    "running",
    "completed",
    "failed",
    "stalled",
    "diverged",
    "stopped",
    "lost",
)


def policy_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's restart policy from its run.json, with defaults (``max_attempts`` 1: no retry)."""
    got = meta.get("restart")
    raw: dict[str, object] = got if isinstance(got, dict) else {}
    stall = raw.get("stall_timeout_s")
    return {
        "max_attempts": max(1, int(str(raw.get("max_attempts") or 1))),
        # lost / nccl / stalled attempts retried without spending max_attempts (pippa_contract.retry)
        "infra_retries": max(0, int(str(raw.get("infra_retries", INFRA_RETRIES)))),
        "on_oom": str(raw.get("on_oom") or "halve"),
        "backoff_s": float(str(raw.get("backoff_s", BACKOFF_S))),
        "backoff_cap_s": float(str(raw.get("backoff_cap_s", BACKOFF_CAP_S))),
        # a number: fixed; "off": no watch; None: derived from the run's step times (pippa_contract.stall)
        "stall_timeout_s": "off" if stall == "off" else float(str(stall)) if stall else None,
        "retry_diverged": bool(raw.get("retry_diverged", False)),
        "grace_s": float(str(raw.get("grace_s", GRACE_S))),
        # pippa run --budget: the most the run may spend (money; pippa_contract.ledger), None: no limit
        "budget": float(str(raw["budget"])) if raw.get("budget") else None,
    }


def backoff(attempt: int, policy: dict[str, Any]) -> float:
    """The wait after attempt ``attempt`` (1-based) failed: backoff, 2x backoff, ... capped."""
    return float(min(policy["backoff_cap_s"], policy["backoff_s"] * 2 ** max(0, attempt - 1)))


def budget(attempts: list[dict[str, Any]], max_attempts: int, n: int) -> int:
    """The m of ``attempt n/m``: 1 + --retry, plus the retries granted that spend none (infrastructure,
    OOM): what the supervisor's log lines, ``ps`` and ``why`` all say."""
    free = sum(1 for a in attempts if (a.get("decision") or {}).get("spends") in ("infra", "oom"))
    return max(n, max_attempts + free)


def summarize(doc: object) -> dict[str, Any] | None:
    """What ``ps`` shows of an attempts.json: attempt now (or last), max, last outcome, reason (pure)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("attempts"), list):
        return None
    attempts = [a for a in doc["attempts"] if isinstance(a, dict)]
    if not attempts:
        return None
    last = attempts[-1]
    return {
        "attempt": len(attempts),
        "max_attempts": int(doc.get("max_attempts") or len(attempts)),
        # the m of "attempt n/m" as the log says it: the free retries (infra, OOM) count
        "of": budget(attempts, int(doc.get("max_attempts") or len(attempts)), len(attempts)),
        "outcome": str(last.get("outcome") or ""),
        "reason": last.get("reason"),
        "next_at": doc.get("next_at"),
        "gave_up": bool(doc.get("gave_up")),
    }
