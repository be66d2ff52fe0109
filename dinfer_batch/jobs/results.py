"""A job's results read back in input order, a page of items at a time, as OpenAI
`BatchRequestOutput` lines (formats/output.py builds each line): for `results`, the API's
result files and the dashboard. Memory stays bounded by the page, however long the job."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.fastjson import dumps
from dinfer_batch.formats.output import ItemRow, JobFields, lines
from dinfer_batch.model_info import public_name
from dinfer_batch.parallel import forkable, ordered_map
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job

PAGE = 5000
_COLUMNS = [Item.__table__.c[name] for name in ItemRow._fields]


def job_fields(job: Job) -> JobFields:
    return JobFields(job.id, public_name(job.model), job.status, job.params or {}, job.seed_base,
                     job.created_at)


def outputs(sessions: sessionmaker[Session], job: Job,
            per_sample: bool = False) -> Iterator[dict[str, Any]]:
    """Every line of the job, in input order; memory is bounded by PAGE."""
    fields = job_fields(job)
    for after in _pages(sessions, job.id):
        yield from lines(fields, _page(sessions, job.id, after), per_sample)


def output_texts(url: str, job: Job, per_sample: bool = False, split_errors: bool = False,
                 processes: int = 0) -> Generator[tuple[str, str], None, None]:
    """The job's lines as JSONL text, a page at a time in input order: (lines, "") or,
    with `split_errors`, (successes, failures). `processes` (forked) each read and
    format pages while this one writes them; close the iterator when stopping early."""
    sessions = db.sessions(url)
    pages = _pages(sessions, job.id)
    processes = forkable(min(processes, len(pages) - 1))
    if processes:
        db.db_engine(url).dispose()  # a forked process must open connections of its own
    return ordered_map(_PageText(url, job_fields(job), per_sample, split_errors), pages,
                       processes)


def result_file_bytes(url: str, job: Job, failed: bool) -> Iterator[bytes]:
    """An ended job's output file (the successes) or error file (the rest), as
    `dinfer-batch results --errors` writes them, a page at a time: what the API's result
    files and the dashboard's downloads serve."""
    for good, bad in output_texts(url, job, split_errors=True):
        yield (bad if failed else good).encode()


@dataclass(frozen=True)
class _PageText:
    url: str
    job: JobFields
    per_sample: bool
    split_errors: bool

    def __call__(self, after: int) -> tuple[str, str]:
        good: list[str] = []
        failed: list[str] = []
        for line in lines(self.job, _page(db.sessions(self.url), self.job.id, after),
                           self.per_sample):
            (failed if self.split_errors and line["error"] else good).append(dumps(line))
        return "".join(f"{text}\n" for text in good), "".join(f"{text}\n" for text in failed)


def _pages(sessions: sessionmaker[Session], job_id: str) -> range:
    """Where each page starts. Pages are ranges of line numbers, not LIMITs: a planner
    misled by stale statistics (right after a million-row write) then sorts at most a
    page, not the rest of the job, per page."""
    with sessions() as session:
        last = session.scalar(select(func.max(Item.line)).where(Item.job_id == job_id)) or 0
    return range(0, last, PAGE)


def _page(sessions: sessionmaker[Session], job_id: str, after: int) -> list[ItemRow]:
    with sessions() as session:  # plain rows with the items' attributes, not ORM objects
        rows = session.connection().execute(
            select(*_COLUMNS).where(Item.job_id == job_id, Item.line > after,
                                    Item.line <= after + PAGE)
            .order_by(Item.line)).all()
    return [ItemRow._make(row) for row in rows]  # a Row's attributes cost 10x a tuple's
