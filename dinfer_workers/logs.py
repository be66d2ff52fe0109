"""A worker's log, as a service's: our own lines (one per chunk, faults) at INFO, Celery's
and kombu's at WARNING unless the level is debug, timestamps on every line. Celery's
banner is not printed, its root-privileges SecurityWarning is replaced by one line of our
own, and its "Failed to mark task ... as revoked in backend" warnings are dropped: there
is no result backend by design (docs/adr/002), so they report nothing wrong."""

from __future__ import annotations

import logging
import sys
import warnings

CHATTY = ("celery", "kombu", "amqp")
LEVELS = ("debug", "info", "warning", "error")


def without_root_warning() -> None:
    """Celery warns when it runs as root, before logging is set up; the CLI says it in one
    line of its own instead, once per node."""
    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", category=SecurityWarning)


class _NoRevokedInBackend(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "as revoked in backend" not in str(record.msg)


def configure(level: str, name: str) -> None:
    """Log to stderr at `level` (one of LEVELS), each line naming the worker `name`;
    Celery's own loggers at WARNING unless `level` is debug."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {name} %(levelname)s %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(_NoRevokedInBackend())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
