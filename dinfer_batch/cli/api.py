"""`dinfer-batch api` (the HTTP server) and `dinfer-batch keys` (its API keys)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.api.keys import create_key, list_keys, revoke_key, update_key
from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError
from dinfer_batch.jobs.running.cache_scopes import check_shared_salt
from dinfer_batch.jobs.spec import parse_priority, priority_name
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import ApiKey

GRACE_S = 5


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Server processes (uvicorn workers).")
@click.pass_obj
def api(config: Settings, host: str, port: int, workers: int) -> None:
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

    db.ready_for(config)  # a wrong database is a usage error now, not on each request
    # allowed as Host when auth is off: the server processes' own entry (create_app, which
    # uvicorn imports by name) reads its settings from the environment they inherit
    os.environ["DINFER_BATCH_API_BIND"] = host
    # SIGTERM: in-flight requests get GRACE_S to finish, then the server stops anyway
    uvicorn.run("dinfer_batch.server:create_app", factory=True, host=host, port=port,
                workers=workers, log_level="info", timeout_graceful_shutdown=GRACE_S)


@click.group()
def keys() -> None:
    """API keys for `dinfer-batch api` (only a hash of each secret is stored)."""


LIMIT = click.IntRange(min=0)
LIMIT_HELP = ("Most {} its owner may have enqueued (unfinished) at once; a batch that would "
              "pass it gets 429. Default: DINFER_BATCH_MAX_ENQUEUED_{}.")
# option -> (key column, help); the owner's entitlements (jobs/intake/entitlements.py, ADR 017)
ENTITLEMENTS = {
    "max-priority": ("max_priority", "Highest priority its batches may ask for: low, normal, "
                     "high or an integer up to 1000; above it a batch gets 403. Default: "
                     "normal."),
    "max-chunk-size": ("max_chunk_size", "Largest chunk_size, in generations (lines x n), "
                       "its batches may ask for (403 above it). Default: "
                       "DINFER_BATCH_MAX_CHUNK_SIZE, else 256 (docs/service.md)."),
    "max-request-tokens": ("max_request_tokens", "Most tokens one request may ask to "
                           "generate, max_tokens x n; a line over it fails alone. Default: "
                           "DINFER_BATCH_MAX_REQUEST_TOKENS, else none beyond the model's."),
    "max-batch-requests": ("max_batch_requests", "Most lines one batch file may hold (403 "
                           "above it). Default: DINFER_BATCH_MAX_BATCH_REQUESTS, else 50,000."),
}
SHARED_SALT = "shared-cache-salt"
DEFAULTS = ("requests", "tokens", *(option[4:] for option in ENTITLEMENTS), SHARED_SALT)


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option, (_, text) in reversed(ENTITLEMENTS.items()):
        kind: Any = str if option == "max-priority" else click.IntRange(min=1)
        command = click.option(f"--{option}", type=kind, help=text)(command)
    command = click.option(f"--{SHARED_SALT}", help=(
        "Share cached prompt blocks with every owner granted the same NAME (their lines' "
        "prompt prefixes become visible to each other through reuse and timing; "
        "docs/service.md). Default: none, the owner's blocks are its own."))(command)
    command = click.option("--max-enqueued-tokens", type=LIMIT,
                           help=LIMIT_HELP.format("tokens (prompt + max tokens of each "
                                                  "request)", "TOKENS"))(command)
    return click.option("--max-enqueued-requests", type=LIMIT,
                        help=LIMIT_HELP.format("requests (x n)", "REQUESTS"))(command)


def _given(options: dict[str, Any]) -> dict[str, int | str | None]:
    """The key columns set by these options (priorities parsed)."""
    given: dict[str, int | str | None] = {}
    if options.get("shared_cache_salt") is not None:
        try:
            given["shared_cache_salt"] = check_shared_salt(options["shared_cache_salt"])
        except UserError as exc:
            raise click.BadParameter(str(exc), param_hint=f"--{SHARED_SALT}") from exc
    for name in ("max_enqueued_requests", "max_enqueued_tokens"):
        if options.get(name) is not None:
            given[name] = options[name]
    for column, _ in ENTITLEMENTS.values():
        value = options.get(column)
        if value is not None:
            given[column] = _priority(value) if column == "max_priority" else value
    return given


def _priority(value: str) -> int:
    try:
        return parse_priority(value)
    except UserError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-priority") from exc


@keys.command()
@click.argument("name")
@click.option("--owner", help="Whose files and batches the key reaches (default: NAME); "
                              "'local', the CLI's own owner, is reserved.")
@click.option("--admin", is_flag=True,
              help="The key also reads fleet-wide data: /metrics and every owner's jobs.")
@setting_options
@click.pass_obj
def create(config: Settings, name: str, owner: str | None, admin: bool, **options: Any) -> None:
    """Create a key NAME and print its secret (shown this once). Limits and entitlements
    apply to the key's owner (the smallest of its keys' when it has several). Example:

        dinfer-batch keys create alice --max-priority high --max-chunk-size 512
    """
    click.echo(create_key(db.ready_for(config), name, owner, admin,
                          settings=_given(options)))


@keys.command()
@click.argument("name")
@setting_options
@click.option("--default-requests", is_flag=True,
              help="Drop the key's own requests limit (the default applies again).")
@click.option("--default-tokens", is_flag=True,
              help="Drop the key's own tokens limit (the default applies again).")
@click.option("--default", "defaults", multiple=True, type=click.Choice(DEFAULTS),
              help="Drop the key's own setting of this name (the default applies again); "
                   "repeatable.")
@click.pass_obj
def update(config: Settings, name: str, default_requests: bool, default_tokens: bool,
           defaults: tuple[str, ...], **options: Any) -> None:
    """Change key NAME's limits and entitlements; batches already queued stay. Example:

        dinfer-batch keys update alice --max-enqueued-tokens 5000000 --max-priority high
    """
    changes = _given(options)
    dropped = set(defaults) | {kind for kind, flag in (("requests", default_requests),
                                                       ("tokens", default_tokens)) if flag}
    for kind in dropped:
        column = (f"max_enqueued_{kind}" if kind in ("requests", "tokens") else kind
                  if kind == SHARED_SALT else f"max_{kind}").replace("-", "_")
        if column in changes:
            raise click.UsageError(f"--{column.replace('_', '-')} and --default {kind} "
                                   "contradict")
        changes[column] = None
    if not changes:
        raise click.UsageError("nothing to change: give a --max-... option or --default "
                               "(see --help)")
    key = update_key(db.ready_for(config), name, changes)
    click.echo(f"{name}: " + ", ".join(f"{label} {shown}" for label, shown in _row(key)))


def _row(key: ApiKey) -> list[tuple[str, str]]:
    """(column title, shown value) of a key's limits and entitlements."""
    return [("max req", _limit(key.max_enqueued_requests)),
            ("max tokens", _limit(key.max_enqueued_tokens)),
            ("max priority", "default" if key.max_priority is None
             else priority_name(key.max_priority)),
            ("max chunk", _limit(key.max_chunk_size)),
            ("max req tokens", _limit(key.max_request_tokens)),
            ("max batch", _limit(key.max_batch_requests)),
            ("shared cache", key.shared_cache_salt or "-")]


@keys.command("list")
@click.pass_obj
def list_(config: Settings) -> None:
    """List keys: name, owner, admin, limits, entitlements, created, revoked ("default":
    the service's default applies)."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    keys_ = list_keys(db.ready_for(config))
    columns = ["name", "owner", "admin", *(title for title, _ in _row(ApiKey())),
               "created", "revoked"]
    for column in columns:
        table.add_column(column)
    for key in keys_:
        table.add_row(key.name, key.owner, "yes" if key.admin else "-",
                      *(shown for _, shown in _row(key)),
                      _when(key.created_at), _when(key.revoked_at))
    Console(width=200).print(table)


@keys.command()
@click.argument("name")
@click.pass_obj
def revoke(config: Settings, name: str) -> None:
    """Revoke key NAME: requests with it get 401 from now on."""
    revoke_key(db.ready_for(config), name)
    click.echo(f"{name} revoked")


def _limit(value: int | None) -> str:
    return "default" if value is None else f"{value:,}"


def _when(timestamp: float | None) -> str:
    import datetime

    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M")
