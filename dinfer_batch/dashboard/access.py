"""Who looks at a page, and whether a form really comes from one of ours.

Signing in puts the API key itself in an HttpOnly, SameSite=Strict cookie: each request
resolves it with the same `caller_of` as a Bearer header, so a revoked key is out at once,
every API replica and restart accepts it, and the server keeps no signing secret or session
table (docs/adr/015-dashboard.md weighs this against signed sessions). No page ever holds
the key. A POST (sign-in, sign-out, cancel, retry) must also carry an Origin (or Referer)
naming this very host: a form posted from another site is refused even where a browser
would send the cookie along."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.keys import Caller, caller_of
from dinfer_batch.storage.tables import LOCAL_OWNER

COOKIE = "dinfer_batch_key"
COOKIE_MAX_AGE_S = 12 * 3600


def page_caller(request: Request, database: sessionmaker[Session]) -> Caller | None:
    """The signed-in key's holder; None when not signed in (or the key was revoked). With
    DINFER_BATCH_API_AUTH=off everyone is an admin of owner local, as in the API."""
    if not request.app.state.auth:
        return Caller(LOCAL_OWNER, admin=True)
    secret = request.cookies.get(COOKIE)
    return caller_of(database, secret) if secret else None


def sign_in(response: Response, request: Request, secret: str) -> None:
    response.set_cookie(COOKIE, secret, max_age=COOKIE_MAX_AGE_S, path="/", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def sign_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def same_origin(request: Request) -> bool:
    """The form was posted by a page of this host (a reverse proxy must pass Host on)."""
    source = request.headers.get("origin") or request.headers.get("referer") or ""
    host = request.headers.get("host")
    return bool(host) and source not in ("", "null") and urlsplit(source).netloc == host


def local_path(target: str | None) -> str:
    """A `next` address to go back to after signing in: a path of this site, else `/`."""
    if (not target or not target.startswith("/") or target.startswith("//") or "\\" in target
            or not target.isprintable() or " " in target):  # browsers drop tabs: "/\t/x"
        return "/"
    return target
