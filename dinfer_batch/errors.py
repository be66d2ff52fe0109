"""Errors the CLI turns into one readable line and an exit code, and the HTTP API into a
status code. The subclasses of UserError only tell the API which status to answer."""


class UserError(Exception):
    """Bad input or usage: nothing was queued (exit code 2, HTTP 400)."""


class NotFound(UserError):
    """No such job or file, or not the caller's (HTTP 404)."""


class WrongState(UserError):
    """The object exists but cannot do that now, e.g. cancel an ended job (HTTP 409)."""


class Unavailable(UserError):
    """The database or the broker cannot be reached (HTTP 503)."""


class JobFailed(Exception):
    """The job ran and ended failed, cancelled or expired (exit code 1)."""


class CannotWrite(Exception):
    """An output file could not be written (read-only, disk full): exit code 1; nothing
    incomplete is left under its name."""
