"""Errors the CLI turns into one readable line and an exit code, and the HTTP API into a
status code. The subclasses of UserError only tell the API which status to answer."""

from __future__ import annotations

from collections.abc import Callable
from string import Formatter


class UserError(Exception):
    """Bad input or usage: nothing was queued (exit code 2, HTTP 400)."""


class OptionError(UserError):
    """Options of a job that do not go together or do not parse, named as fields
    (`{template} and {vars} go together`): `str()` names the fields themselves, `naming`
    names them as the caller's user spelt them (the command line: its flags). `values`
    fill the other placeholders as they are."""

    def __init__(self, text: str, **values: str) -> None:
        self.text, self.values = text, values
        super().__init__(self.naming(str))

    def naming(self, name: Callable[[str], str]) -> str:
        fields = {field for _, field, _, _ in Formatter().parse(self.text)
                  if field and field not in self.values}
        return self.text.format(**{field: name(field) for field in fields}, **self.values)


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
