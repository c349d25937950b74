"""Typed errors of training_core and the exit code each maps to.

training_core never imports pippa_ops, so it keeps its own small hierarchy; the codes match
``pippa_ops.errors.ExitCode`` (2 = bad input) so the laptop reads the same meaning from both halves.
The entry points (``train``, ``eval``) print ``str(error)`` as one line and exit with ``exit_code``.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Base of every error the entry points turn into one line and an exit code."""

    exit_code: int = 1


class UsageError(TrainingError):
    exit_code = 2


class UnknownRecipe(UsageError):
    pass


class BadSetting(UsageError):
    """A ``--set key=value`` (or a recipe key) that names no setting or has the wrong type."""


class UnknownName(UsageError):
    """A dataset, reward, eval task or callback name that no registry knows."""


class SandboxMissing(TrainingError):
    """No real isolation for model-written code on this host (bubblewrap or user namespaces missing)."""


class StartFailed(TrainingError):
    """The run failed before its first step (model or data did not load); the cause is chained."""
