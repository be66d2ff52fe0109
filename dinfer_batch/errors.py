"""Errors the CLI turns into one readable line and an exit code."""


class UserError(Exception):
    """Bad input or usage: nothing was queued (exit code 2)."""


class JobFailed(Exception):
    """The job ran and ended failed, cancelled or expired (exit code 1)."""
