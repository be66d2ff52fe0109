"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
status that fits: the service's own errors map by class, an invalid body is a 400 naming
the field, and unknown paths and methods keep their 404 / 405. A database that goes away
under a running server is a 503, not a 500. No message tells a client about the servers
behind the API (redact.for_clients): no URL, credential or host, no server path (an
upload's path is shown as its file id); a database or broker out of reach is a 503 that
says which, with the details in the server's log."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from dinfer_batch.errors import NotFound, Unavailable, UserError, WrongState
from dinfer_batch.formats.limits import shown
from dinfer_batch.jobs.intake.entitlements import NotEntitled
from dinfer_batch.jobs.intake.quota import QuotaExceeded
from dinfer_batch.redact import for_clients, mask

log = logging.getLogger("dinfer_batch.api")

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
         413: "invalid_request_error", 500: "server_error", 503: "server_error"}


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class ApiError(HTTPException):
    """Raised by the routes for an answer other than 200. An HTTPException, so that one
    raised while FastAPI reads the body (the gate's size limit) keeps its status."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(status, message)
        self.status, self.message, self.param, self.code = status, message, param, code


def server_dirs(app: Any) -> list[Path]:
    """The directories no client may see, from the settings `app` was made with."""
    dirs: list[Path] = app.state.settings.server_dirs()
    return dirs


def error_response(status: int, message: str, param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None, *,
                   dirs: Sequence[Path]) -> JSONResponse:
    """The answer; `dirs`: the server's directories, left out of the message."""
    body = {"error": {"message": client_text(message, dirs),
                      "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def client_text(message: str, dirs: Sequence[Path]) -> str:
    """`message` without credentials, URLs, hosts or paths under `dirs`."""
    return for_clients(mask(message), list(dirs))


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: these statuses answer an ErrorResponse."""
    return {status: {"model": ErrorResponse} for status in statuses}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.message, exc.param, exc.code, headers,
                              dirs=server_dirs(request.app))

    @app.exception_handler(UserError)
    async def _user_error(request: Request, exc: UserError) -> JSONResponse:
        dirs = server_dirs(request.app)
        if isinstance(exc, QuotaExceeded):  # as OpenAI's rate limits: type tokens/requests
            body = {"error": {"message": str(exc), "type": exc.kind, "param": exc.param,
                              "code": "rate_limit_exceeded", "limit": exc.limit,
                              "usage": exc.usage, "requested": exc.asked}}
            return JSONResponse(body, status_code=429)
        if isinstance(exc, NotEntitled):  # the entitlement, named (jobs/intake/entitlements.py)
            return error_response(403, str(exc), exc.param, "not_entitled", dirs=dirs)
        if isinstance(exc, Unavailable):
            return _unavailable(str(exc), dirs)
        return error_response(status_of(exc), str(exc), dirs=dirs)

    @app.exception_handler(OperationalError)
    async def _database_down(request: Request, exc: OperationalError) -> JSONResponse:
        return _unavailable("the database cannot be reached: "
                            + " ".join(str(exc.orig).split()), server_dirs(request.app))

    @app.exception_handler(PoolTimeout)
    async def _budget_spent(request: Request, exc: PoolTimeout) -> JSONResponse:
        """Every connection of the process's budget (DINFER_BATCH_DB_POOL_SIZE) stayed in
        use for DbPool.timeout: the database is out of reach for this request."""
        return _unavailable(f"the database connection budget is in use: {exc}",
                            server_dirs(request.app))

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query",
                                                                             "path", "header")]
        param = ".".join(where) or None
        sent = "" if first.get("type") == "missing" or "input" not in first else \
            f", got {shown(first['input'])}"
        return error_response(400, f"{param or 'request'}: {first.get('msg')}{sent}", param,
                              "invalid_value", dirs=server_dirs(request.app))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        """A bug of ours (the tests hold every client input to a 4xx): still OpenAI's
        shape, and logged with its traceback by the server."""
        return error_response(500, f"internal error: {type(exc).__name__}",
                              dirs=server_dirs(request.app))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers is not None else None
        return error_response(exc.status_code, str(exc.detail), headers=headers,
                              dirs=server_dirs(request.app))


def _unavailable(detail: str, dirs: Sequence[Path]) -> JSONResponse:
    """503: which service is out of reach, and nothing of where it is (the log has it)."""
    log.warning("503: %s", mask(detail))
    what = "the database" if "database" in detail else "the job queue (broker)"
    return error_response(503, f"{what} cannot be reached; try again later", dirs=dirs)


def status_of(exc: UserError) -> int:
    for cls, status in ((NotFound, 404), (WrongState, 409), (Unavailable, 503),
                        (NotEntitled, 403), (QuotaExceeded, 429)):
        if isinstance(exc, cls):
            return status
    return 400
