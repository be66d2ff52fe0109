"""Stream a JSONL file into a job: check each line (`line_check`, in parallel processes
for a big file), insert items in bulk batches, cut the valid ones into chunks of up to
`chunk_size` generations (each line at its cost: formats/lines/cost.py). On PostgreSQL
everything happens in one transaction; on SQLite, whose one writer would lock every other
owner out for the whole file, each batch is its own short transaction while the job stays
`validating`, and a file rejected on the way (empty, duplicate custom_id, over a quota or
an entitlement) is deleted again (jobs/intake/slices.py): either way nothing is left behind.
Memory stays bounded by the batch size however long the file is."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import MAX_LINE_CHARS
from dinfer_batch.formats.lines.columns import LineParser
from dinfer_batch.gc_pause import no_cycle_collection
from dinfer_batch.jobs.expiry import window_seconds
from dinfer_batch.jobs.intake.dedup import Duplicates
from dinfer_batch.jobs.intake.entitlements import NotEntitled, check_job
from dinfer_batch.jobs.intake.line_check import CheckedLine, LineChecker, TextBatch
from dinfer_batch.jobs.intake.parquet_input import (
    BATCH_BYTES,
    default_columns,
    is_parquet,
    row_count,
    row_texts,
)
from dinfer_batch.jobs.intake.prefix_order import placing_order
from dinfer_batch.jobs.intake.quota import check as check_quota
from dinfer_batch.jobs.intake.quota import limits_of
from dinfer_batch.jobs.intake.slices import Slices
from dinfer_batch.jobs.reading.view import kept_model_names
from dinfer_batch.jobs.spec import Entitlements, JobSpec
from dinfer_batch.jobs.transitions import move
from dinfer_batch.parallel import forkable, ordered_map
from dinfer_batch.statuses import ChunkStatus, ItemStatus, JobStatus
from dinfer_batch.storage.service_text import storable
from dinfer_batch.storage.tables import Chunk, Item, Job

if TYPE_CHECKING:
    import psycopg

INSERT_BATCH = 5000


@dataclass
class _Tally:
    duplicates: Duplicates
    total: int = 0
    failed: int = 0
    valid: int = 0  # lines that run: valid and not a duplicate of an earlier line
    deduplicated: int = 0
    tokens: int = 0  # of the valid lines, when counted
    cost: int = 0  # the generations of the lines that run
    # each chunk's (lines, generations): a chunk holds up to chunk_size generations
    chunks: list[tuple[int, int]] = field(default_factory=list)
    other_models: Counter[str] = field(default_factory=Counter)  # lines run on ours instead

    @property
    def asked(self) -> int:
        """What the batch asks of its owner's quota, in requests: every line (an invalid
        one too: it was stored), a line that runs at its cost (n for a line of n plain
        samples)."""
        return self.total + self.cost - self.valid

    def chunk_for(self, cost: int, chunk_size: int) -> int:
        """The chunk a line of `cost` generations goes to: the last one while it has
        room (any chunk takes at least one line)."""
        if not self.chunks or self.chunks[-1][1] + cost > chunk_size:
            return len(self.chunks)
        return len(self.chunks) - 1

    def place(self, chunk: int, cost: int) -> None:
        if chunk == len(self.chunks):
            self.chunks.append((0, 0))
        lines, total = self.chunks[chunk]
        self.chunks[chunk] = (lines + 1, total + cost)
        self.cost += cost


def ingest(sessions: sessionmaker[Session], path: Path, spec: JobSpec, config: Settings,
           template: LineParser | None = None, processes: int = 0) -> Job:
    """Create the job and its items; the returned job is `in_progress` (or already `failed`
    when no line is valid); `config` gives the owners' default quotas and the upload size
    limit. Raises UserError, with nothing left behind, for a bad file. With a
    `template`, `path` is its vars file: each line's request is the template rendered with
    that line's variables. `processes` (forked, where `forkable`) check a big file's lines
    beside this one, which numbers and writes them. A Parquet file's rows are its lines
    (jobs/intake/parquet_input.py), its `prompt` or `messages` column the request unless
    `template` (formats/lines/columns.py's Columns) names another."""
    if not path.is_file():
        raise UserError(f"input file not found: {path}")
    if template is None and is_parquet(path):
        template = default_columns(path)
    now = time.time()
    job = _new_job(spec, path, now)
    with Slices(sessions) as slices, no_cycle_collection(), \
            ThreadPoolExecutor(1) as writer:
        session = slices.session
        entitled = spec.entitled
        check_job(entitled, spec.priority, spec.chunk_size)
        limits = limits_of(session, spec.owner, config)
        session.add(job)
        slices.made(job.id)
        lines = _line_count(path)
        tally = _Tally(Duplicates(lines))
        # a server database writes one batch (this thread waiting on it, the GIL free) while
        # the next is read; the session is used by one thread at a time, and a batch's error
        # is raised before the next batch is written, as in sequence. SQLite writes in this
        # process, a slice per batch: a writer thread would only contend for the GIL
        overlap = not slices.sliced
        writing: Future[None] | None = None
        # a file of one batch has nothing to overlap: checked here
        checked = ordered_map(LineChecker(spec, template, limits.tokens is not None,
                                          entitled.max_request_tokens,
                                          entitled.max_chunk_size),
                              _text_batches(path, config.max_file_bytes if spec.input_file_id
                                            else None),
                              forkable(processes) if lines > INSERT_BATCH else 0)
        with closing(checked):  # a bad file stops it early: its processes end here
            for batch in checked:
                rows = _rows(job, spec.chunk_size, batch, tally)
                _within(entitled, tally.total)
                if writing:
                    writing.result()
                if overlap:
                    writing = writer.submit(_insert, session, job.id, rows)
                else:
                    _insert(session, job.id, rows)
                    check_quota(session, job, limits, tally.asked, tally.tokens)  # fail early
                    slices.commit()
        if writing:
            writing.result()
        if tally.total == 0:
            raise UserError(f"{path} has no requests (the file is empty)")
        check_quota(session, job, limits, tally.asked, tally.tokens)
        if slices.sliced:
            session.refresh(job)  # cancelled while it was read: its chunks never open
        _open(session, job, spec, tally, now)
    return job


def _open(session: Session, job: Job, spec: JobSpec, tally: _Tally, now: float) -> None:
    """Make the job's chunks and move it on from validating: in progress (its completion
    window starting), failed when no line is valid, or cancelled when it was cancelled
    while its lines were read (its chunks never open)."""
    cancelled = job.status != JobStatus.VALIDATING
    job.enqueued_tokens = 0 if cancelled else tally.tokens
    job.cost = tally.cost
    _add_chunks(session, job, tally.chunks,
                ChunkStatus.CANCELLED if cancelled else ChunkStatus.QUEUED)
    job.total_count, job.failed_count = tally.total, tally.failed
    job.deduplicated_count = tally.deduplicated
    job.other_models = kept_model_names(tally.other_models) or None
    job.chunk_count = len(tally.chunks)
    if cancelled:
        move(session, job.id, JobStatus.CANCELLED)
    elif tally.valid:
        window = ({"expires_at": now + window_seconds(spec.completion_window)}
                  if spec.completion_window else {})
        move(session, job.id, JobStatus.IN_PROGRESS, **window)
    else:
        move(session, job.id, JobStatus.FAILED,
             error="no line of the file is a valid request")


def _new_job(spec: JobSpec, path: Path, now: float) -> Job:
    return Job(id=f"batch_{uuid.uuid4().hex}", status=JobStatus.VALIDATING.value,
               model=spec.model.name, queue=spec.queue, input_file=str(path.resolve()),
               params=spec.params, meta=spec.metadata, chunk_size=spec.chunk_size,
               seed_base=spec.seed_base, created_at=now, owner=spec.owner,
               endpoint=spec.endpoint, input_file_id=spec.input_file_id,
               completion_window=spec.completion_window, priority=spec.priority,
               served=0.0, enqueued_tokens=0)


def _within(entitled: Entitlements, total: int) -> None:
    limit = entitled.max_batch_requests
    if limit is not None and total > limit:
        raise NotEntitled("input_file_id", (
            f"the file has more than {limit:,} lines, this key's max_batch_requests; split "
            "it into several batches"))


def _line_count(path: Path) -> int:
    """At least as many lines as reading the file as text gives (which also ends a line at
    a lone \\r): its line breaks, and one for a last unended line; a Parquet file's rows."""
    if is_parquet(path):
        return row_count(path)
    count = 1
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            count += block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
    return count


def _text_batches(path: Path, decoded_limit: int | None) -> Iterator[TextBatch]:
    """The file's lines; a UTF-8 byte order mark is skipped, and invalid UTF-8 bytes
    reach the line's check as lone surrogates (an error for that line alone, not silently
    U+FFFD). A line is read up to MAX_LINE_CHARS + 1 characters and the rest of it
    skipped: the check refuses it by that length. A batch is INSERT_BATCH lines or
    BATCH_BYTES characters, whichever comes first, so memory stays bounded by bytes as
    well as lines. A Parquet file's rows come as JSON objects, batches bounded the same
    way (jobs/intake/parquet_input.py), which decode to at most `decoded_limit` characters (an
    upload's limit) when one is given."""
    if is_parquet(path):
        first = 1
        for texts in row_texts(path, INSERT_BATCH, total_bytes=decoded_limit):
            yield TextBatch(first, texts)
            first += len(texts)
        return
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as lines:
        first, texts, held = 1, [], 0
        while text := lines.readline(MAX_LINE_CHARS + 1):
            if len(text) > MAX_LINE_CHARS and text[-1] != "\n":
                while (rest := lines.readline(MAX_LINE_CHARS)) and rest[-1] != "\n":
                    pass
            texts.append(text)
            held += len(text)
            if len(texts) >= INSERT_BATCH or held >= BATCH_BYTES:
                yield TextBatch(first, texts)
                first, texts, held = first + len(texts), [], 0
    if texts:
        yield TextBatch(first, texts)


ITEM_COLUMNS = ("job_id", "line", "custom_id", "chunk_id", "request", "status", "attempts",
                "error_code", "error_message", "finished_at", "duplicate_of", "tokens",
                "cost")


def _rows(job: Job, chunk_size: int, batch: list[CheckedLine],
          tally: _Tally) -> list[tuple[Any, ...]]:
    """Item rows as tuples in ITEM_COLUMNS' order (no per-row dicts: a million of them),
    in input order; the batch's valid lines are placed into chunks in the order that puts
    lines sharing a prompt prefix together (jobs/intake/prefix_order.py). Identical requests
    have equal prefixes, so the first of them in input order is still the one that runs."""
    valid = [checked for checked in batch if not checked.error]
    placed: dict[int, tuple[int, int | None]] = {}  # line -> its chunk, the line it copies
    for index in placing_order([checked.prefix for checked in valid]):
        line, key, cost = valid[index].line, valid[index].key, valid[index].cost
        assert key is not None, "a valid line has a dedup key"
        chunk = tally.chunk_for(cost, chunk_size)
        first = tally.duplicates.original(key, line, chunk)
        if first is None:
            tally.valid += 1
            tally.place(chunk, cost)
            placed[line] = (chunk, None)
        else:
            tally.deduplicated += 1
            placed[line] = (first[1], first[0])
    rows: list[tuple[Any, ...]] = []
    for line, custom_id, request, error, _, tokens, other_model, cost, _ in batch:
        if other_model is not None:
            tally.other_models[other_model] += 1
        if error:
            tally.failed += 1
            rows.append((job.id, line, custom_id, None, None, ItemStatus.FAILED.value, 0,
                         "invalid_request", storable(error),  # COPY skips column types
                         job.created_at, None, None, None))
        else:
            if tokens is not None:
                tally.tokens += tokens
            chunk, original = placed[line]
            rows.append((job.id, line, custom_id, chunk, request, ItemStatus.PENDING.value, 0,
                         None, None, None, original, tokens, cost))
        tally.total += 1
    return rows


def _insert(session: Session, job_id: str, rows: list[tuple[Any, ...]]) -> None:
    """Bulk insert; a custom_id seen before (in this batch, or in an earlier one through
    the unique index) is a UserError naming both lines. Only lines' own ids count: a line
    without one stores none (the unique index skips NULLs), so the name its results
    read (line-N) can never clash with another line's. A batch of blank lines has no
    rows, and inserts nothing (an empty executemany is one statement without values)."""
    if not rows:
        return
    seen: dict[str, int] = {}
    for row in rows:
        custom_id, line = row[2], row[1]
        if custom_id is None:
            continue
        if custom_id in seen:
            _duplicate(custom_id, seen[custom_id], line)
        seen[custom_id] = line
    connection = session.connection()
    try:
        with connection.begin_nested():  # emits SAVEPOINT now: COPY bypasses the session
            _bulk_insert(connection, rows)
    except (IntegrityError, connection.dialect.loaded_dbapi.IntegrityError):
        earlier = session.execute(
            select(Item.custom_id, Item.line)
            .where(Item.job_id == job_id, Item.custom_id.in_(list(seen)))
            .order_by(Item.line)
        ).first()
        if earlier is None:
            raise
        _duplicate(earlier.custom_id, earlier.line, seen[earlier.custom_id])


def _bulk_insert(connection: Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert item rows at the driver's speed: COPY on PostgreSQL, one executemany on
    SQLite (the ORM's per-row bookkeeping would cost more than the database)."""
    columns = ", ".join(ITEM_COLUMNS)
    if connection.dialect.name == "postgresql":
        driver = cast("psycopg.Connection[Any]", connection.connection.dbapi_connection)
        with driver.cursor() as cursor, \
                cursor.copy(f"COPY items ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        marks = ", ".join("?" * len(ITEM_COLUMNS))
        connection.exec_driver_sql(f"INSERT INTO items ({columns}) VALUES ({marks})", rows)


def _duplicate(custom_id: str, first: int, second: int) -> None:
    raise UserError(f"duplicate custom_id {custom_id!r} on lines {first} and {second}; "
                    "custom_ids must be unique within a file")


def _add_chunks(session: Session, job: Job, chunks: list[tuple[int, int]],
                status: ChunkStatus) -> None:
    rows = []
    for chunk_id, (size, cost) in enumerate(chunks):
        rows.append({"job_id": job.id, "chunk_id": chunk_id, "status": status.value,
                     "size": size, "cost": cost, "attempts": 0})
        if len(rows) >= INSERT_BATCH:
            session.execute(insert(Chunk), rows)
            rows = []
    if rows:
        session.execute(insert(Chunk), rows)
