"""Errors the CLI turns into one readable line and an exit code."""


class UserError(Exception):
    """Bad input or usage: nothing was queued (exit code 2)."""


class JobFailed(Exception):
    """The job ran and ended failed, cancelled or expired (exit code 1)."""


class CannotWrite(Exception):
    """An output file could not be written (read-only, disk full): exit code 1; nothing
    incomplete is left under its name."""
