"""Database calls that wait out an outage. A worker that cannot reach the database must
not fail its chunk (the broker would count the chunk as consumed): it retries with
backoff and goes on where it was once the database is back. Every call retried this way
is idempotent (docs/adr/002): a result is written only while its item is pending."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger(__name__)

UNREACHABLE = (OperationalError, InterfaceError)  # refused, reset, shut down, locked


def unreachable(exc: BaseException) -> bool:
    """Whether a database error says the database, or the way to it, is away for now: one
    of UNREACHABLE, or psycopg's own InternalError (not a server's internal error, which is
    psycopg.errors.InternalError_): a reply out of step with its command, as when PgBouncer
    answers a connection whose server was restarted ("received 2 results from command
    'COMMIT'"); the call is retried on another connection."""
    return isinstance(exc, UNREACHABLE) or (
        isinstance(exc, DBAPIError) and type(exc.orig) is psycopg.InternalError)
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0

P = ParamSpec("P")
T = TypeVar("T")


class DatabaseDown(Exception):
    """The database stayed unreachable for DINFER_BATCH_DB_RETRY_SECONDS."""


def patiently(seconds: float, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)`, retried with exponential backoff (0.25 s doubling up to 5 s)
    while the database is unreachable; DatabaseDown after `seconds` (the process's
    DINFER_BATCH_DB_RETRY_SECONDS)."""
    deadline = time.monotonic() + seconds
    delay = FIRST_DELAY_S
    while True:
        try:
            return call(*args, **kwargs)
        except DBAPIError as exc:
            if not unreachable(exc):
                raise
            reason = " ".join(str(exc.orig or exc).split())
            if time.monotonic() + delay > deadline:
                raise DatabaseDown(f"the database is unreachable: {reason}") from exc
            log.warning("database unreachable, retrying %s in %.2fs: %s",
                        getattr(call, "__name__", "call"), delay, reason)
            time.sleep(delay)
            delay = min(2 * delay, MAX_DELAY_S)
