"""Typed errors of the ops core and the exit code each maps to.

The core raises these; the CLI's single top-level handler prints ``str(error)`` as one line and exits
with ``error.exit_code``. Messages are written for people: what is wrong and what to do about it.
"""

from __future__ import annotations

from enum import IntEnum


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


class UsageError(PippaError):
    exit_code = ExitCode.USAGE


class InvalidName(UsageError):
    """A session, run or recipe name that does not match the strict pattern (never reaches a shell)."""


class UnknownRecipe(UsageError):
    pass


class BadSetting(UsageError):
    """A ``--set key=value`` that is malformed or names an unknown key."""


class UnknownHost(PippaError):
    exit_code = ExitCode.UNKNOWN_HOST


class HostUnreachable(PippaError):
    exit_code = ExitCode.UNREACHABLE


class AuthFailed(PippaError):
    exit_code = ExitCode.AUTH


class HostKeyRejected(PippaError):
    """Base for host-key refusals: unknown (can be accepted) or changed (always refused)."""

    exit_code = ExitCode.HOST_KEY


class HostKeyUnknown(HostKeyRejected):
    pass


class HostKeyChanged(HostKeyRejected):
    pass


class ToolMissing(PippaError):
    exit_code = ExitCode.MISSING_TOOL


class SessionExists(PippaError):
    exit_code = ExitCode.CONFLICT


class AmbiguousSession(PippaError):
    exit_code = ExitCode.CONFLICT


class SessionNotFound(PippaError):
    exit_code = ExitCode.NOT_FOUND


class RunNotFound(PippaError):
    exit_code = ExitCode.NOT_FOUND


class RemoteCommandFailed(PippaError):
    exit_code = ExitCode.FAILURE


class RunStillActive(PippaError):
    """A run that is still running or queued was asked to resume."""

    exit_code = ExitCode.CONFLICT


class NotResumable(UsageError):
    """A run that has no recipe (a ``--cmd`` run) has no checkpoint to resume from."""


class WaitTimeout(PippaError):
    """``pippa wait --timeout`` passed before the runs ended."""

    exit_code = ExitCode.TIMEOUT


class NotAttachable(UsageError):
    """``attach`` to a run that has no terminal (a SLURM batch job): the message says what to use."""
