"""The first thing every request meets (a pure ASGI middleware), so that a stranger costs
the server nothing: an API request's key is checked from the headers before one byte of
the body is read, and every body is counted while it streams in (chunked uploads
included) and cut off at its limit, so neither a 100 MB JSON body nor an endless upload
is parsed or spooled.

A key is looked up in a worker thread (one indexed query), so the event loop keeps
answering `/healthz` meanwhile; a request without any key is refused in the loop itself.
The caller found is left in the request's state for the routes (`auth.caller`)."""

from __future__ import annotations

import logging

from anyio import to_thread
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dinfer_batch.api.auth import identify
from dinfer_batch.api.errors import ApiError, error_response, server_dirs
from dinfer_batch.api.keys import Caller
from dinfer_batch.errors import UserError
from dinfer_batch.redact import mask

log = logging.getLogger("dinfer_batch.api")

KEYED = "/v1/"  # the API's paths, keyed by a Bearer header; the dashboard has its cookie
MULTIPART_OVERHEAD = 64 * 1024  # boundaries and headers around an upload's bytes
MAX_JSON_BYTES = 1 << 20  # any other body: a batch's options, far below this


class Gate:
    def __init__(self, app: ASGIApp, file_limit: int, metrics_public: bool) -> None:
        self.app, self.file_limit, self.metrics_public = app, file_limit, metrics_public

    def keyed(self, path: str) -> bool:
        """Whether `path` needs a Bearer key: the API's, and /metrics unless public.
        Operations endpoints, the schema and the dashboard's pages (which identify their
        caller by a cookie, dashboard/access.py) pass with the body limit alone."""
        return path.startswith(KEYED) or (path == "/metrics" and not self.metrics_public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if "\x00" in scope["path"]:  # no object's id holds one
                raise ApiError(404, "no such object: the path contains a NUL character")
            if b"%00" in scope["query_string"]:
                raise ApiError(400, "the query contains a NUL character", code="invalid_url")
            _check_host(scope)
            if self.keyed(scope["path"]):
                scope.setdefault("state", {})["caller"] = await self._caller(scope)
            limit = self._limit(scope)
            declared = _header(scope, b"content-length")
            if declared.isdigit() and int(declared) > limit:
                raise _too_large(scope, limit)
        except ApiError as exc:
            await _answer(scope, receive, send, exc)
            return
        await self.app(scope, _counted(receive, scope, limit), send)

    async def _caller(self, scope: Scope) -> Caller:
        state = scope["app"].state
        header = _header(scope, b"authorization")
        if not state.auth or not header.lower().startswith("bearer "):
            return identify(state, header)  # local, or refused: no thread, no query
        try:
            return await to_thread.run_sync(identify, state, header)
        except (UserError, SQLAlchemyError) as exc:  # no database to ask: not the caller's
            log.warning("503: %s", mask(" ".join(str(getattr(exc, "orig", exc)).split())))
            raise ApiError(503, "the database cannot be reached; try again later") from exc

    def _limit(self, scope: Scope) -> int:
        if scope["method"] == "POST" and scope["path"] == "/v1/files":
            return self.file_limit + MULTIPART_OVERHEAD
        return MAX_JSON_BYTES


def _counted(receive: Receive, scope: Scope, limit: int) -> Receive:
    """`receive`, raising 413 (an HTTPException, which FastAPI passes through while it
    reads the body) as soon as more than `limit` bytes came."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _too_large(scope, limit)
        return message

    return counted


def _too_large(scope: Scope, limit: int) -> ApiError:
    if scope["path"] == "/v1/files":
        limit -= MULTIPART_OVERHEAD
        return ApiError(413, f"the file is larger than the limit of {limit} bytes "
                             "(DINFER_BATCH_MAX_FILE_BYTES)", "file", "file_too_large")
    return ApiError(413, f"the request body is larger than the limit of {limit} bytes",
                    code="body_too_large")


UNCHECKED_HOST = ("/healthz", "/readyz")  # probes tell nothing, and come by any name


def _check_host(scope: Scope) -> None:
    """While auth is off, the request's `Host` must be an allowed one
    (DINFER_BATCH_ALLOWED_HOSTS): a page of another site whose name now points here
    (DNS rebinding) names its own host, and would otherwise pass as this origin."""
    state = scope["app"].state
    if state.auth or "*" in state.allowed_hosts or scope["path"] in UNCHECKED_HOST:
        return
    host = _header(scope, b"host").strip().lower()
    if _host_name(host) not in state.allowed_hosts:
        raise ApiError(400, f"Host {host!r} is not allowed while DINFER_BATCH_API_AUTH=off; "
                            "add it to DINFER_BATCH_ALLOWED_HOSTS", code="host_not_allowed")


def _host_name(host: str) -> str:
    """`Host` without its port: `[::1]:8000` -> `::1`, `localhost:8000` -> `localhost`."""
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


async def _answer(scope: Scope, receive: Receive, send: Send, exc: ApiError) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    response = error_response(exc.status, exc.message, exc.param, exc.code, headers,
                              dirs=server_dirs(scope["app"]))
    await response(scope, receive, send)

