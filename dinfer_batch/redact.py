"""Credentials never leave in a message: every URL shown to a log reader or a terminal
goes through `mask`, which hides the password (Redis writes it as `redis://:PASSWORD@host`)
and the values of secret-looking query parameters (`?token=...`) while keeping the
scheme, user, host, port and path that tell which server is meant. What the HTTP API
tells a client goes through `for_clients` as well: no URL, no host, no server path."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path, PurePath

# scheme://userinfo@ : the userinfo is everything up to the last @ before the host
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/]*)@")
# scheme://anything up to a space, quote or bracket
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()\[\]]*")


def mask(text: str) -> str:
    """`text` with the secret of every `scheme://user:secret@host` in it replaced by
    `***`: `redis://:pw@h:6379/0` -> `redis://:***@h:6379/0`,
    `postgresql://bob:pw@db/x` -> `postgresql://bob:***@db/x`; a user without a secret
    (`postgresql://bob@db/x`) is a name, and stays. Every value of a URL's query string
    and its fragment are secrets too (`?token=abc&v=2` -> `?token=***&v=***`): which
    parameter carries a credential is the receiver's convention, not ours to guess."""
    return _URL.sub(_masked_query, _USERINFO.sub(_masked, text))


def _masked_query(match: re.Match[str]) -> str:
    url, hash_, fragment = match[0].partition("#")
    base, question, query = url.partition("?")
    if question:
        pairs = (part.partition("=") for part in query.split("&"))
        query = "&".join(f"{name}=***" if eq else name for name, eq, _value in pairs)
    return f"{base}{question}{query}{hash_}{'***' if fragment else ''}"


def _masked(match: re.Match[str]) -> str:
    user, colon, _secret = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:***@" if colon else match[0]


def for_clients(text: str, roots: Iterable[str | Path]) -> str:
    """`text` fit for a client of the HTTP API, which must learn nothing of the servers
    behind it: every URL is cut to its scheme (`redis://...`: no host, port or
    credential), and every path under one of `roots` (the server's directories) to its
    last part (an upload's path becomes its file id, a model's its directory name)."""
    text = _URL.sub(lambda match: match[0].split("://", 1)[0] + "://...", text)
    for root in sorted({str(r).rstrip("/") for r in roots if str(r).strip("/")},
                       key=len, reverse=True):
        pattern = re.escape(root) + r"(?:/[^\s'\"]*)?"
        text = re.sub(pattern, lambda match: _last_part(match[0]), text)
    return text


def _last_part(path: str) -> str:
    return PurePath(path.rstrip("/.,;:")).name + path[len(path.rstrip("/.,;:")):] or "..."
