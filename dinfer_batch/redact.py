"""Credentials never leave in a message: every URL shown to a client, a log reader or a
terminal goes through `mask`, which hides the password (Redis writes it as
`redis://:PASSWORD@host`) while keeping the scheme, user, host, port and path that tell
which server is meant."""

from __future__ import annotations

import re

# scheme://userinfo@ : the userinfo is everything up to the last @ before the host
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/]*)@")


def mask(text: str) -> str:
    """`text` with the secret of every `scheme://user:secret@host` in it replaced by
    `***`: `redis://:pw@h:6379/0` -> `redis://:***@h:6379/0`,
    `postgresql://bob:pw@db/x` -> `postgresql://bob:***@db/x`; a user without a secret
    (`postgresql://bob@db/x`) is a name, and stays."""
    return _USERINFO.sub(_masked, text)


def _masked(match: re.Match[str]) -> str:
    user, colon, _secret = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:***@" if colon else match[0]
