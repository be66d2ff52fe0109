"""`dinfer-batch webhooks ...` (signed notifications when jobs end) and `dinfer-batch
delete` (a job's requests and results)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.config import Settings
from dinfer_batch.jobs import retention
from dinfer_batch.redact import mask
from dinfer_batch.statuses import DeliveryStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import LOCAL_OWNER
from dinfer_batch.webhooks import endpoints
from dinfer_batch.webhooks.events import ENDED_TYPES


@click.group()
def webhooks() -> None:
    """Endpoints that get a signed POST when a job ends (batch.completed, batch.failed,
    batch.cancelled, batch.expired), as OpenAI sends them: verify them with the official
    client, `OpenAI(webhook_secret=SECRET).webhooks.unwrap(body, headers)`.

    Deliveries are sent by `dinfer-batch beat` (keep one running); failed ones are
    retried for 24 h with the same event id. Example:

    \b
      dinfer-batch webhooks add https://example.com/hooks --events batch.completed
      dinfer-batch beat
      dinfer-batch webhooks deliveries --failed
    """


@webhooks.command("add")
@click.argument("url")
@click.option("--events", default=",".join(ENDED_TYPES), show_default=True,
              help="Comma-separated event types to send.")
@click.option("--owner", default=LOCAL_OWNER, show_default=True,
              help="Whose jobs: an API key's owner; `local` for the CLI's jobs.")
@click.pass_obj
def add(config: Settings, url: str, events: str, owner: str) -> None:
    """Add an endpoint; prints its id, then its signing secret (shown this once)."""
    wanted = endpoints.parse_events(events)  # usage errors before the database
    endpoints.check_url(url)
    added = endpoints.add_endpoint(db.ready_for(config), url, wanted, owner)
    click.echo(added.id)
    click.echo(added.secret)


@webhooks.command("list")
@click.option("--json", "as_json", is_flag=True, help="One endpoint per line, as JSON.")
@click.pass_obj
def list_(config: Settings, as_json: bool) -> None:
    """List endpoints: id, owner, events, URL (never the secret, nor a password in it)."""
    rows = [{"id": e.id, "owner": e.owner, "events": e.events.split(","), "url": mask(e.url),
             "created_at": int(e.created_at)}
            for e in endpoints.list_endpoints(db.ready_for(config))]
    _show(rows, as_json, ("id", "owner", "events", "url"))


@webhooks.command()
@click.argument("endpoint_id", metavar="ID")
@click.pass_obj
def remove(config: Settings, endpoint_id: str) -> None:
    """Remove endpoint ID; its deliveries still pending fail at once."""
    dropped = endpoints.remove_endpoint(db.ready_for(config), endpoint_id)
    click.echo(f"{endpoint_id} removed ({dropped} pending deliveries dropped)")


@webhooks.command()
@click.option("--failed", is_flag=True,
              help="Only deliveries whose last attempt failed (being retried, or given up).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One delivery per line, as JSON.")
@click.pass_obj
def deliveries(config: Settings, failed: bool, limit: int, as_json: bool) -> None:
    """Recent deliveries, newest first: event, job, endpoint, status, attempts, the last
    answer (HTTP status or error), and when the next attempt is due."""
    rows = [{"event": event.id, "type": event.type, "job": event.job_id,
             "endpoint": delivery.endpoint_id, "status": delivery.status,
             "attempts": delivery.attempts,
             "last": delivery.last_error or delivery.last_status_code,
             "next": (_when(delivery.next_attempt_at)
                      if delivery.status == DeliveryStatus.PENDING else None)}
            for delivery, event in endpoints.list_deliveries(db.ready_for(config),
                                                             failed, limit)]
    _show(rows, as_json, ("event", "job", "endpoint", "status", "attempts", "last", "next"))


def _show(rows: list[dict[str, Any]], as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row[column]) for column in columns))
    Console().print(table)


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(value)
    return "-" if value is None else str(value)


@click.command()
@click.argument("job_id", metavar="JOB")
@click.pass_obj
def delete(config: Settings, job_id: str) -> None:
    """Delete JOB's requests and results (refused while it runs: cancel it first). The job
    stays listed, with its counts; `results` then answers that they are gone. Ended jobs
    are also purged by `beat` after DINFER_BATCH_RETENTION_DAYS, when set.

        dinfer-batch delete JOB
    """
    deleted = retention.delete_job(db.ready_for(config), job_id)
    click.echo(f"{job_id}: {deleted} request(s) and result(s) deleted")


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S")
