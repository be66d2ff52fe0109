"""Every status write of every table: one conditional UPDATE from the statuses the
vocabulary's table allows (dinfer_batch/statuses.py) to the one entered, so no caller
spells where a status may come from; a caller's extra conditions (`where`) only narrow
it, and a move the table does not allow matches no row, as a lost race does. The table
and its sources follow from the status entered (TABLES). What else a change does is the
caller's, in the same transaction; a job's move also stamps its time and records its end
(jobs/transitions.py). docs/adr/044-one-transitions-table.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, Update, bindparam, false, or_, update
from sqlalchemy.orm import Session

from dinfer_batch.statuses import (
    CHUNK_SOURCES,
    DELIVERY_SOURCES,
    ITEM_SOURCES,
    JOB_SOURCES,
    RUN_SOURCES,
    ChunkStatus,
    DeliveryStatus,
    ItemStatus,
    JobStatus,
    RunStatus,
    Status,
)
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.tables import Chunk, Item, Job, ScheduleRun, WebhookDelivery

Model = type[Job] | type[Chunk] | type[Item] | type[ScheduleRun] | type[WebhookDelivery]

# each vocabulary's table and its legal sources: a new status column is one row
TABLES: Mapping[type[Status], tuple[Model, Mapping[Any, tuple[Status, ...]]]] = {
    JobStatus: (Job, JOB_SOURCES),
    ChunkStatus: (Chunk, CHUNK_SOURCES),
    ItemStatus: (Item, ITEM_SOURCES),
    RunStatus: (ScheduleRun, RUN_SOURCES),
    DeliveryStatus: (WebhookDelivery, DELIVERY_SOURCES),
}


def move_rows(session: Session, to: Status, *where: ColumnElement[bool], **values: Any) -> int:
    """Move the rows of `to`'s table that `where` selects and that are in a status `to`
    may be entered from to `to`, setting `values` too; how many moved."""
    model, sources = TABLES[type(to)]
    return changed(session, update(model).where(_movable(model, sources[to]), *where)
                   .values(status=str(to), **values))


def move_each(session: Session, to: Status, rows: Sequence[dict[str, Any]]) -> None:
    """Move each row (its primary key and its own values, one statement for all) to `to`,
    those in a status `to` may be entered from, for rows whose values differ (an item's
    result, a chunk's close): one Core UPDATE by primary key, executed for every row at
    once, and built once per status and set of columns (building it through the ORM, or
    at every call, cost a worker more CPU than running it)."""
    if not rows:  # an empty executemany would be one statement without values
        return
    # keyed by the vocabulary too: statuses of two tables may spell the same ("cancelled")
    session.connection().execute(_each_statement(type(to), to, tuple(rows[0])),
                                 _each_parameters(to, rows))


@cache
def _each_statement(vocabulary: type[Status], to: Status, names: tuple[str, ...]) -> Update:
    """`move_each`'s statement for rows with these values (primary key included)."""
    model, sources = TABLES[vocabulary]
    table = cast(Table, model.__table__)
    keys = [column.name for column in table.primary_key]
    return (update(table)
            .where(_movable(model, sources[to]),
                   *(table.c[key] == bindparam(f"key_{key}") for key in keys))
            .values(status=str(to), **{name: bindparam(name) for name in names
                                       if name not in keys}))


def _each_parameters(to: Status, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as `_each_statement`'s parameters (the primary key renamed)."""
    keys = {column.name for column in TABLES[type(to)][0].__table__.primary_key}
    return [{(f"key_{name}" if name in keys else name): value
             for name, value in row.items()} for row in rows]


def _movable(model: Model, sources: tuple[Status, ...]) -> ColumnElement[bool]:
    """The rows in one of `sources`, spelt as equalities: an executemany cannot expand
    IN's list, and no sources (a status rows are made with) matches none."""
    return or_(false(), *(model.status == str(status) for status in sources))
