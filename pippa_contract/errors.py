"""One enum of error kinds: the agent answers ``{"error": kind, "message": ...}``, the keeper relays
the laptop's own errors under the same kinds, and the client raises the typed error of each kind."""

from __future__ import annotations

from enum import Enum


class ErrorKind(str, Enum):
    # answered by the host agent
    USAGE = "usage"
    NOT_FOUND = "not_found"
    SESSION_EXISTS = "session_exists"
    TOOL_MISSING = "tool_missing"
    SLURM = "slurm"
    SYNC = "sync"
    TMUX = "tmux"
    # the laptop's errors, relayed by the connection keeper
    INVALID_NAME = "invalid_name"
    UNKNOWN_RECIPE = "unknown_recipe"
    BAD_SETTING = "bad_setting"
    UNKNOWN_HOST = "unknown_host"
    HOST_UNREACHABLE = "host_unreachable"
    AUTH_FAILED = "auth_failed"
    HOST_KEY_REJECTED = "host_key_rejected"
    HOST_KEY_UNKNOWN = "host_key_unknown"
    HOST_KEY_CHANGED = "host_key_changed"
    AMBIGUOUS_SESSION = "ambiguous_session"
    SESSION_NOT_FOUND = "session_not_found"
    REMOTE_FAILED = "remote_failed"
    RUN_STILL_ACTIVE = "run_still_active"
    NOT_RESUMABLE = "not_resumable"
    WAIT_TIMEOUT = "wait_timeout"
    NOT_ATTACHABLE = "not_attachable"
    WANDB_UNAVAILABLE = "wandb_unavailable"
    TIMEOUT = "timeout"
    # anything else: the keeper could not do it (the client goes direct)
    INTERNAL = "internal"

    @classmethod
    def parse(cls, value: object) -> ErrorKind:
        try:
            return cls(value)
        except ValueError:
            return cls.INTERNAL


class AgentError(Exception):
    """An expected failure on the host, answered as ``{"error": kind, "message": ...}``."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def answer(self) -> dict[str, str]:
        return {"error": self.kind.value, "message": str(self)}
