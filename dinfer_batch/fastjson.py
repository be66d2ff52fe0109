"""JSON at the speed a million-line file needs: orjson, with the standard library behind it
for what orjson refuses (NaN, integers beyond 64 bits), so that what is accepted and the
error messages stay the standard library's. Output is compact UTF-8."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def canonical(value: Any) -> str:
    """Compact, keys sorted: equal values give equal text (a cache key)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
