"""`dinfer-batch api` (the HTTP server) and `dinfer-batch keys` (its API keys)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.api.keys import create_key, list_keys, revoke_key, update_limits
from dinfer_batch.config import database_url
from dinfer_batch.jobs.quota import Limits
from dinfer_batch.storage import db

GRACE_S = 5


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Server processes (uvicorn workers).")
def api(host: str, port: int, workers: int) -> None:
    """Serve the OpenAI-compatible Files and Batches API (FastAPI + uvicorn), and the
    web dashboard at / (docs/dashboard.md).

    Uses the same database, broker and models as the CLI; workers run the batches.
    Every API request needs `Authorization: Bearer <key>` (`dinfer-batch keys create`),
    checked before its body is read, unless DINFER_BATCH_API_AUTH=off; /metrics needs an
    admin key, or none with DINFER_BATCH_METRICS_PUBLIC=1. Uploads go to
    DINFER_BATCH_FILES_DIR (limit DINFER_BATCH_MAX_FILE_BYTES, default 200 MB). Schema at
    /openapi.json. Example:

        dinfer-batch api --port 8000
    """
    import uvicorn

    db.ready(database_url())  # a wrong database is a usage error now, not on each request
    os.environ["DINFER_BATCH_API_BIND"] = host  # allowed as Host when auth is off
    # SIGTERM: in-flight requests get GRACE_S to finish, then the server stops anyway
    uvicorn.run("dinfer_batch.api.app:create_app", factory=True, host=host, port=port,
                workers=workers, log_level="info", timeout_graceful_shutdown=GRACE_S)


@click.group()
def keys() -> None:
    """API keys for `dinfer-batch api` (only a hash of each secret is stored)."""


LIMIT = click.IntRange(min=0)
LIMIT_HELP = ("Most {} its owner may have enqueued (unfinished) at once; a batch that would "
              "pass it gets 429. Default: DINFER_BATCH_MAX_ENQUEUED_{}.")


def limit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--max-enqueued-tokens", type=LIMIT,
                           help=LIMIT_HELP.format("tokens (prompt + max tokens of each "
                                                  "request)", "TOKENS"))(command)
    return click.option("--max-enqueued-requests", type=LIMIT,
                        help=LIMIT_HELP.format("requests", "REQUESTS"))(command)


@keys.command()
@click.argument("name")
@click.option("--owner", help="Whose files and batches the key reaches (default: NAME); "
                              "'local', the CLI's own owner, is reserved.")
@click.option("--admin", is_flag=True,
              help="The key also reads fleet-wide data: /metrics and every owner's jobs.")
@limit_options
def create(name: str, owner: str | None, admin: bool, max_enqueued_requests: int | None,
           max_enqueued_tokens: int | None) -> None:
    """Create a key NAME and print its secret (shown this once). Limits apply to the
    key's owner (the smallest of its keys' when it has several)."""
    click.echo(create_key(db.ready(database_url()), name, owner, admin,
                          Limits(max_enqueued_requests, max_enqueued_tokens)))


@keys.command()
@click.argument("name")
@limit_options
@click.option("--default-requests", is_flag=True,
              help="Drop the key's own requests limit (the default applies again).")
@click.option("--default-tokens", is_flag=True,
              help="Drop the key's own tokens limit (the default applies again).")
def update(name: str, max_enqueued_requests: int | None, max_enqueued_tokens: int | None,
           default_requests: bool, default_tokens: bool) -> None:
    """Change key NAME's limits; batches already queued stay. Example:

        dinfer-batch keys update alice --max-enqueued-tokens 5000000
    """
    changes: dict[str, int | None] = {}
    for kind, value, default in (("requests", max_enqueued_requests, default_requests),
                                 ("tokens", max_enqueued_tokens, default_tokens)):
        if value is not None and default:
            raise click.UsageError(f"--max-enqueued-{kind} and --default-{kind} contradict")
        if value is not None or default:
            changes[kind] = value
    if not changes:
        raise click.UsageError("nothing to change: give --max-enqueued-requests, "
                               "--max-enqueued-tokens, --default-requests or --default-tokens")
    key = update_limits(db.ready(database_url()), name, **changes)
    click.echo(f"{name}: max enqueued requests {_limit(key.max_enqueued_requests)}, "
               f"tokens {_limit(key.max_enqueued_tokens)}")


@keys.command("list")
def list_() -> None:
    """List keys: name, owner, admin, limits, created, revoked."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("name", "owner", "admin", "max req", "max tokens", "created", "revoked"):
        table.add_column(column)
    for key in list_keys(db.ready(database_url())):
        table.add_row(key.name, key.owner, "yes" if key.admin else "-",
                      _limit(key.max_enqueued_requests), _limit(key.max_enqueued_tokens),
                      _when(key.created_at), _when(key.revoked_at))
    Console().print(table)


@keys.command()
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke key NAME: requests with it get 401 from now on."""
    revoke_key(db.ready(database_url()), name)
    click.echo(f"{name} revoked")


def _limit(value: int | None) -> str:
    return "default" if value is None else f"{value:,}"


def _when(timestamp: float | None) -> str:
    import datetime

    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M")
