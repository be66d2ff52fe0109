"""`dinfer-batch db`: the database schema (Alembic migrations)."""

from __future__ import annotations

import click

from dinfer_batch.config import Settings
from dinfer_batch.redact import mask
from dinfer_batch.storage import db as database


@click.group()
def db() -> None:
    """Database schema commands."""


@db.command()
@click.pass_obj
def upgrade(config: Settings) -> None:
    """Apply every migration to DINFER_BATCH_DATABASE_URL (creates the schema)."""
    url = config.database_url
    before, after = database.upgrade(url)
    shown = mask(url)
    if before is None:
        click.echo(f"{shown}: created the schema at revision {after}")
    elif before != after:
        click.echo(f"{shown}: upgraded from revision {before} to {after}")
    else:
        click.echo(f"{shown}: already at revision {after}, the latest")
