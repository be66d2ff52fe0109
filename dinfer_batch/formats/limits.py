"""Limits on what a client sends, chosen so that every value either fits every database
the service runs on (SQLite, PostgreSQL) or is refused where it enters, naming the field,
and so that the work per line stays bounded whatever the line holds (docs/adr/010).

A JSON line is decoded by orjson; only when orjson refuses it (NaN, a lone surrogate, an
invalid UTF-8 byte, nesting beyond 1024 levels) does the standard library look again,
so the checks below cost a normal line one substring search."""

from __future__ import annotations

import json
import reprlib
from typing import Any

import orjson

MAX_LINE_CHARS = 4 << 20  # a line (its JSON text); prompts that fit a context are far less
MAX_DEPTH = 1024  # orjson's nesting limit: deeper lines are an error, never a recursion
# 512 characters are at most 2,048 UTF-8 bytes: with the job id, under PostgreSQL's limit
# of 2,704 bytes for an entry of the unique index on (job_id, custom_id)
MAX_CUSTOM_ID = 512
MAX_FILENAME = 255  # what file systems allow for one name
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512  # OpenAI's limits
MAX_INT = 2**63 - 1  # a 64-bit signed integer: what BIGINT columns and orjson hold
NUL_ESCAPE = "\\u0000"


class BadValue(ValueError):
    """A value that cannot be taken; the message names the field."""


class Unstorable(BadValue):
    """A line that is valid JSON with a string no database stores as text; `value` is the
    decoded line, so its other fields (its custom_id) can still be read."""

    def __init__(self, message: str, value: Any) -> None:
        super().__init__(message)
        self.value = value


class InvalidParam(ValueError):
    """A parameter with the wrong type or value; the message names it."""


def decode_line(text: str) -> Any:
    """A line's JSON value. json.JSONDecodeError for invalid JSON (the standard library's
    message); BadValue for nesting deeper than MAX_DEPTH; Unstorable for a string that no
    database stores as text (a NUL, a lone surrogate from an escape or from invalid UTF-8
    bytes)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise BadValue(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        try:
            value = json.loads(text)
        except RecursionError:
            raise BadValue(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        except json.JSONDecodeError:
            raise
        except ValueError as exc:  # an integer of more digits than Python converts
            raise BadValue(f"a number is too large to read ({exc})") from None
    else:
        if NUL_ESCAPE not in text:  # orjson took it: valid UTF-8; a NUL is only escaped
            return value
    found = unstorable(value)
    if found is not None:
        raise Unstorable(found, value)
    return value


def unstorable(value: Any) -> str | None:
    """'<field> <why>' for the first string (key or value) in `value` that is not valid
    text for a database, else None. Iterative: no nesting makes it recurse."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return f"{where or 'the line'} {problem}"
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key)
                if problem:
                    return f"a key in {where or 'the line'} {problem}"
                stack.append((f"{where}.{key}" if where else key, child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None


def text_problem(text: str, limit: int | None = None) -> str | None:
    """Why `text` cannot be stored as text (too long, a NUL, not valid Unicode), or None."""
    if limit is not None and len(text) > limit:
        return f"is longer than {limit} characters"
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return ("is not valid UTF-8 text (invalid bytes in the file, or a lone surrogate "
                "escape such as \\ud800)")
    return None


def check_text(field: str, text: Any, limit: int) -> str:
    """`text` when it is a string that fits (BadValue naming `field` otherwise)."""
    if not isinstance(text, str):
        raise BadValue(f"{field} must be a string, got {shown(text)}")
    problem = text_problem(text, limit)
    if problem:
        raise BadValue(f"{field} {problem}")
    return text


def check_metadata(metadata: dict[str, Any]) -> dict[str, str]:
    """OpenAI's metadata limits: 16 pairs, keys up to 64 and values up to 512 characters."""
    if len(metadata) > MAX_METADATA_PAIRS:
        raise BadValue(f"metadata has {len(metadata)} pairs; at most {MAX_METADATA_PAIRS}")
    for key, value in metadata.items():
        check_text("a metadata key", key, MAX_METADATA_KEY)
        check_text(f"metadata[{shown(key)}]", value, MAX_METADATA_VALUE)
    return metadata


def check_row_metadata(metadata: dict[str, Any]) -> None:
    """A table row's other columns, kept as its request's metadata (formats/lines/columns.py),
    within the bounds of a batch's metadata: at most 16 columns, names up to 64
    characters, each value up to 512 characters of JSON (a string's characters, another
    value's JSON text). BadValue names the column, its size and the bound."""
    if len(metadata) > MAX_METADATA_PAIRS:
        raise BadValue(f"the row has {len(metadata)} other columns kept as metadata "
                       f"({', '.join(map(shown, list(metadata)[:4]))}, ...); at most "
                       f"{MAX_METADATA_PAIRS}")
    for name, value in metadata.items():
        if len(name) > MAX_METADATA_KEY:
            raise BadValue(f"column {shown(name)} has a name longer than {MAX_METADATA_KEY} "
                           "characters, the bound of a metadata key")
        size = len(value) if isinstance(value, str) else len(orjson.dumps(value))
        if size > MAX_METADATA_VALUE:
            raise BadValue(f"column {shown(name)} holds {size:,} characters; a column kept "
                           f"as metadata holds at most {MAX_METADATA_VALUE}")


def shown(value: Any, width: int = 60) -> str:
    """A short description of a client's value for an error message: a repr that looks
    at most 3 levels deep and a few items wide, cut to `width` characters (a plain repr
    of a deep or huge value would recurse, or cost as much as the value)."""
    if isinstance(value, int) and value.bit_length() > 10_000:  # repr refuses > 4300 digits
        return f"an integer of {value.bit_length()} bits"
    text = _SHORT.repr(value)
    return text if len(text) <= width else text[:width] + "..."


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxstring = 3, 4, 4, 60
