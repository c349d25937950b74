"""Typed errors of the ops core and the exit code each maps to.

The core raises these; the CLI's single top-level handler prints ``str(error)`` as one line and exits
with ``error.exit_code``. Messages are written for people: what is wrong and what to do about it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from pippa_contract.errors import ErrorKind


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the job or remote command itself failed
    USAGE = 2  # bad input: unknown recipe, bad --set, invalid name
    UNKNOWN_HOST = 3
    UNREACHABLE = 4
    AUTH = 5
    HOST_KEY = 6
    MISSING_TOOL = 7  # tmux / nvidia-smi / python missing on the host
    CONFLICT = 8  # duplicate session, ambiguous session
    NOT_FOUND = 9  # no such session / run
    TIMEOUT = 124  # `pippa wait --timeout` ran out (as timeout(1) exits)
    INTERRUPTED = 130


def did_you_mean(name: str, known: list[str]) -> str:
    """``" (did you mean 'tiny'?)"`` for the nearest of ``known``, or nothing: for unknown-name errors."""
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class PippaError(Exception):
    """Base of every error the CLI turns into one line and an exit code."""

    exit_code: ExitCode = ExitCode.FAILURE
    kind: ClassVar[ErrorKind] = ErrorKind.INTERNAL  # on the wire (agent answers, the keeper's relay)


class UsageError(PippaError):
    kind = ErrorKind.USAGE
    exit_code = ExitCode.USAGE


class InvalidName(UsageError):
    """A session, run or recipe name that does not match the strict pattern (never reaches a shell)."""

    kind = ErrorKind.INVALID_NAME


class UnknownRecipe(UsageError):
    kind = ErrorKind.UNKNOWN_RECIPE


class BadSetting(UsageError):
    """A ``--set key=value`` that is malformed or names an unknown key."""

    kind = ErrorKind.BAD_SETTING


class UnknownHost(PippaError):
    kind = ErrorKind.UNKNOWN_HOST
    exit_code = ExitCode.UNKNOWN_HOST


class HostUnreachable(PippaError):
    kind = ErrorKind.HOST_UNREACHABLE
    exit_code = ExitCode.UNREACHABLE


class AuthFailed(PippaError):
    kind = ErrorKind.AUTH_FAILED
    exit_code = ExitCode.AUTH


class HostKeyRejected(PippaError):
    """Base for host-key refusals: unknown (can be accepted) or changed (always refused)."""

    kind = ErrorKind.HOST_KEY_REJECTED

    exit_code = ExitCode.HOST_KEY


class HostKeyUnknown(HostKeyRejected):
    kind = ErrorKind.HOST_KEY_UNKNOWN


class HostKeyChanged(HostKeyRejected):
    kind = ErrorKind.HOST_KEY_CHANGED


class ToolMissing(PippaError):
    kind = ErrorKind.TOOL_MISSING
    exit_code = ExitCode.MISSING_TOOL


class SessionExists(PippaError):
    kind = ErrorKind.SESSION_EXISTS
    exit_code = ExitCode.CONFLICT


class AmbiguousSession(PippaError):
    kind = ErrorKind.AMBIGUOUS_SESSION
    exit_code = ExitCode.CONFLICT


class SessionNotFound(PippaError):
    kind = ErrorKind.SESSION_NOT_FOUND
    exit_code = ExitCode.NOT_FOUND


class RunNotFound(PippaError):
    kind = ErrorKind.NOT_FOUND
    exit_code = ExitCode.NOT_FOUND


class RemoteCommandFailed(PippaError):
    kind = ErrorKind.REMOTE_FAILED
    exit_code = ExitCode.FAILURE


class RunStillActive(PippaError):
    """A run that is still running or queued was asked to resume."""

    kind = ErrorKind.RUN_STILL_ACTIVE

    exit_code = ExitCode.CONFLICT


class RunLivesElsewhere(PippaError):
    """A move from a copy the run already left (``moved_to``), or to a host that already has the run."""

    exit_code = ExitCode.CONFLICT


class NotResumable(UsageError):
    """A run that has no recipe (a ``--cmd`` run) has no checkpoint to resume from."""

    kind = ErrorKind.NOT_RESUMABLE


class WaitTimeout(PippaError):
    """``pippa wait --timeout`` passed before the runs ended."""

    kind = ErrorKind.WAIT_TIMEOUT

    exit_code = ExitCode.TIMEOUT


class NotAttachable(UsageError):
    """``attach`` to a run that has no terminal (a SLURM batch job): the message says what to use."""

    kind = ErrorKind.NOT_ATTACHABLE


class WandbUnavailable(PippaError):
    """No key, no wandb package, or W&B did not answer: one line saying which."""

    kind = ErrorKind.WANDB_UNAVAILABLE


def refused_as(e: PippaError) -> str | None:
    """Why a host is not usable when it is not simply down, in a word or two for a table (`pippa
    hosts`, `ps`): it answered with a key pippa does not know, or refused us; None otherwise."""
    if isinstance(e, HostKeyRejected):
        return (
            "key changed"
            if isinstance(e, HostKeyChanged)
            else "key unknown"
            if isinstance(e, HostKeyUnknown)
            else "host key refused"
        )
    return {
        ExitCode.AUTH: "auth failed",
        ExitCode.UNKNOWN_HOST: "unknown host",
        ExitCode.USAGE: "bad entry",
    }.get(e.exit_code)


def error_class(kind: ErrorKind, default: type[Exception]) -> type[Exception]:
    """The error raised for an answer of ``kind`` (an agent's answer, the keeper's relay)."""
    if kind is ErrorKind.TIMEOUT:
        return TimeoutError
    by_kind = {c.kind: c for c in _subclasses(PippaError) if "kind" in vars(c)}
    return by_kind.get(kind, default)


def error_kind(error: BaseException) -> ErrorKind:
    """The kind a relayed error travels as."""
    if isinstance(error, PippaError):
        return error.kind
    return ErrorKind.TIMEOUT if isinstance(error, TimeoutError) else ErrorKind.INTERNAL


def _subclasses(cls: type[PippaError]) -> list[type[PippaError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _subclasses(sub))]


class HostUnhealthy(PippaError):
    """`pippa run` on a host whose last `pippa doctor` verdict (under a day old) is fail, without --force."""

    kind = ErrorKind.REMOTE_FAILED
    exit_code = ExitCode.FAILURE
