"""Text the service writes itself (a job's error, an item's error message, a schedule
run's reason, a webhook's error), as opposed to a client's strings, which are checked
where they enter (dinfer_batch/formats/limits.py). Such text quotes exception messages,
which may hold a NUL (PostgreSQL's text refuses it) or a lone surrogate (not UTF-8, so
neither database takes it); either would make the write fail, and fail again on every
retry of it. Each is stored as U+FFFD instead, by the column type (docs/adr/055)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Dialect, Text, TypeDecorator

# a NUL, and any surrogate code point (paired surrogates never occur in a Python str)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """`text` with each NUL and lone surrogate replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


class ServiceText(TypeDecorator[str]):
    """`text` whose writes pass through `storable`, so that no writer can forget to."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else storable(value)
