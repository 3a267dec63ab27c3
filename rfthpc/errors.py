"""Errors a user can cause, and how the command line reports them.

A `UserError` carries a message that names the offending thing and the fix. The CLI prints it
without a traceback and exits with code 2; anything else that escapes is a bug and keeps its
traceback.
"""

from __future__ import annotations

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """A problem in the user's input (config, paths, command line) rather than in rfthpc itself."""

    exit_code: int = USER_ERROR_EXIT_CODE


class ConfigError(UserError):
    """The configuration is invalid: unknown key, wrong type, missing or inconsistent value."""


class SlurmError(UserError):
    """Slurm refused a request or cannot be reached."""


EXIT_PREEMPTED = 124
"""Exit code of a role that stopped cleanly on SIGTERM/SIGUSR2 (preemption, time limit): requeue it."""
