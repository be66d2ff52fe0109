"""A job's results read back in input order, a page of items at a time, as OpenAI
`BatchRequestOutput` lines (formats/results/output.py builds each line): for `results`, the API's
result files and the dashboard. Memory stays bounded by the page, however long the job.

A page is up to PAGE lines and about PAGE_BYTES bytes of its items (page_bounds: the
database measures the items' texts, only their sizes cross), so that a page of long
answers or long metadata is a few MB, not 5,000 lines of any size.

Every page is checked after it was read (check_unchanged): a job purged or retried while
its results are read raises ResultsChanged, so no reader ends cleanly on part of a file."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Text, cast, func, literal, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import WrongState
from dinfer_batch.fastjson import dumps
from dinfer_batch.formats.results.output import ItemRow, JobFields, lines
from dinfer_batch.jobs.expiry import as_read
from dinfer_batch.model_info import public_name
from dinfer_batch.parallel import forkable, ordered_map
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job

PAGE = 5000
PAGE_BYTES = 4 << 20
_COLUMNS = [Item.__table__.c[name] for name in ItemRow._fields]
# about an item's part of its line, in characters: its texts (a request's only for its
# metadata, but it is read with the item) and a line's fixed fields
_SIZE = sum((func.coalesce(func.length(cast(column, Text)), 0) for column in (
    Item.request, Item.output_text, Item.samples, Item.logprobs, Item.error_message,
    Item.custom_id)), literal(400))
T = TypeVar("T")


class ResultsChanged(WrongState):
    """The job's results were deleted or changed while they were read: what was read is
    not one consistent file, and the reader must not end as if it were."""


def job_fields(job: Job) -> JobFields:
    return JobFields(job.id, public_name(job.model), job.status, job.params or {}, job.seed_base,
                     job.created_at)


def version_of(job: Job) -> str:
    """What an ended job's result files depend on besides its items, which change only
    before its end: the end itself (a retried job ends again), retries, the page
    bounds."""
    return _version(job.status, job.completed_at or job.failed_at or job.cancelled_at
                    or job.expired_at, job.retries)


def _version(status: str, ended: float | None, retries: int) -> str:
    return f"{status}:{ended!r}:{retries}:{PAGE}:{PAGE_BYTES}"


def check_unchanged(sessions: sessionmaker[Session], job_id: str, version: str) -> None:
    """ResultsChanged unless the job is still at `version` and not purged. A purge marks
    the job before it deletes any item, so a page read before this check passes was read
    whole: checked after every page, a reader gets every page of one version, or an
    error."""
    with sessions() as session:
        job = session.get(Job, job_id)
    if job is None or job.purged_at is not None:
        raise ResultsChanged(f"job {job_id}'s results were deleted while they were read; "
                             "what was read is incomplete")
    if version_of(as_read(job)) != version:
        raise ResultsChanged(f"job {job_id} was retried while its results were read; read "
                             "them again once it has ended")


def outputs(sessions: sessionmaker[Session], job: Job,
            per_sample: bool = False) -> Iterator[dict[str, Any]]:
    """Every line of the job, in input order; memory is bounded by PAGE."""
    fields, version = job_fields(job), version_of(job)
    for bounds in page_bounds(sessions, job.id):
        page = page_rows(sessions, job.id, bounds)
        check_unchanged(sessions, job.id, version)
        yield from lines(fields, page, per_sample)


def output_texts(url: str, job: Job, per_sample: bool = False, split_errors: bool = False,
                 processes: int = 0) -> Generator[tuple[str, str], None, None]:
    """The job's lines as JSONL text, a page at a time in input order: (lines, "") or,
    with `split_errors`, (successes, failures). `processes` (forked) each read and
    format pages while this one writes them; close the iterator when stopping early."""
    sessions = db.sessions(url)
    pages = list(page_bounds(sessions, job.id))
    processes = forkable(min(processes, len(pages) - 1))
    if processes:
        db.db_engine(url).dispose()  # a forked process must open connections of its own
    return checked(url, job, ordered_map(
        _PageText(url, job_fields(job), per_sample, split_errors), pages, processes))


def checked(url: str, job: Job, pages: Generator[T, None, None]) -> Generator[T, None, None]:
    """`pages` of `job`, each checked (check_unchanged) after it was read."""
    sessions, version = db.sessions(url), version_of(job)
    with closing(pages):
        for page in pages:
            check_unchanged(sessions, job.id, version)
            yield page


@dataclass(frozen=True)
class _PageText:
    url: str
    job: JobFields
    per_sample: bool
    split_errors: bool

    def __call__(self, bounds: Bounds) -> tuple[str, str]:
        good: list[str] = []
        failed: list[str] = []
        for line in lines(self.job, page_rows(db.sessions(self.url), self.job.id, bounds),
                          self.per_sample):
            (failed if self.split_errors and line["error"] else good).append(dumps(line))
        return "".join(f"{text}\n" for text in good), "".join(f"{text}\n" for text in failed)


def last_line(sessions: sessionmaker[Session], job_id: str) -> int:
    with sessions() as session:
        return session.scalar(select(func.max(Item.line)).where(Item.job_id == job_id)) or 0


Bounds = tuple[int, int]  # a page's lines: (after, last]


def page_bounds(sessions: sessionmaker[Session], job_id: str,
                after: int = 0) -> Iterator[Bounds]:
    """Each page's lines from line `after` on: up to PAGE lines, ending at the line that
    takes its items to PAGE_BYTES (a page holds at least one line). Pages are ranges of
    line numbers, not LIMITs: a planner misled by stale statistics (right after a
    million-row write) then sorts at most a page, not the rest of the job, per page."""
    last = last_line(sessions, job_id)
    while after < last:
        with sessions() as session:
            sizes = session.execute(select(Item.line, _SIZE).where(
                Item.job_id == job_id, Item.line > after, Item.line <= after + PAGE)
                .order_by(Item.line)).all()
        end, held = min(last, after + PAGE), 0
        for line, size in sizes:
            held += size
            if held >= PAGE_BYTES:
                end = line
                break
        yield after, end
        after = end


def page_rows(sessions: sessionmaker[Session], job_id: str, bounds: Bounds) -> list[ItemRow]:
    """The items of the page of lines (after, last]."""
    after, last = bounds
    with sessions() as session:  # plain rows with the items' attributes, not ORM objects
        rows = session.connection().execute(
            select(*_COLUMNS).where(Item.job_id == job_id, Item.line > after,
                                    Item.line <= last)
            .order_by(Item.line)).all()
    return [ItemRow._make(row) for row in rows]  # a Row's attributes are slow to read
