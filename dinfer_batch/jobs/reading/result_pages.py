"""An ended job's result files as byte ranges, for downloads that resume: `Range` on the
API's result files and the dashboard's downloads, and `dinfer-batch results -o FILE`
continuing a partial FILE.

A result file is made from the job's items a page (up to results.PAGE lines and about
results.PAGE_BYTES bytes) at a time. The first time a page is read, its last line and
its size and SHA-256 in each of the three files (every line; the successes; the
failures) are recorded in `result_pages` (`page` holds the last line: a page's lines
follow the page before), for the job's content `version` (its end, retries and page
bounds: a retried job ends again with other content; rows of an older version are never
read, and dropped when the new version's first page is recorded). From these
rows a file has a length, an ETag (a digest of its pages' digests: it changes only when
the bytes do) and, for any byte offset, the page that holds it, so that reading from
byte N reads only the items of that page onward, never the file or the items before.

Every page read is checked against the job afterwards: a job purged (or retried) while it
was read raises ResultsChanged, so that a reader never ends cleanly on part of a file; a
page whose bytes differ from those recorded (a purge under way, or new code) too."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.fastjson import dumps
from dinfer_batch.formats.results.output import JobFields, lines
from dinfer_batch.jobs.reading.results import (
    Bounds,
    ResultsChanged,
    checked,
    job_fields,
    last_line,
    page_bounds,
    page_rows,
    version_of,
)
from dinfer_batch.parallel import forkable, ordered_map
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Job, ResultPage

KINDS = ("all", "output", "errors")


class Page(NamedTuple):
    number: int
    data: tuple[bytes, bytes, bytes]  # in KINDS' order
    sha256: tuple[str, str, str]


@dataclass(frozen=True)
class FileIndex:
    """One result file of one job version: the bytes and digest of each of its pages."""

    kind: str
    version: str
    sizes: list[int]
    digests: list[str]

    @property
    def size(self) -> int:
        return sum(self.sizes)

    @property
    def etag(self) -> str:
        joined = "".join(self.digests).encode()
        return hashlib.sha256(f"{self.kind}:".encode() + joined).hexdigest()[:32]

    def starts(self) -> list[int]:
        """The offset of each page's first byte."""
        offsets, at = [], 0
        for size in self.sizes:
            offsets.append(at)
            at += size
        return offsets

    def page_at(self, offset: int) -> int:
        """The page holding byte `offset` (the page count at or past the end)."""
        ends, at = [], 0
        for size in self.sizes:
            at += size
            ends.append(at)
        return bisect.bisect_right(ends, offset)


def file_index(url: str, job: Job, kind: str, processes: int = 0) -> FileIndex:
    """The index of `job`'s file `kind`, reading (and recording) the pages not recorded
    yet: a full pass over the items the first time, nothing after."""
    sessions = db.sessions(url)
    version = version_of(job)
    recorded = _recorded(sessions, job.id, version)
    if (recorded[-1].last if recorded else 0) < last_line(sessions, job.id):
        with closing(page_stream(url, job, len(recorded), processes)) as pages:
            for _ in pages:
                pass
        recorded = _recorded(sessions, job.id, version)
    column = KINDS.index(kind)
    return FileIndex(kind, version, [page.sizes[column] for page in recorded],
                     [page.digests[column] for page in recorded])


def recorded_prefix(url: str, job: Job) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """(sizes, digests) of the job's recorded pages, for its current version: always the
    first pages of its files (a page is recorded only after the one before it)."""
    return [(page.sizes, page.digests)
            for page in _recorded(db.sessions(url), job.id, version_of(job))]


def page_stream(url: str, job: Job, first: int = 0,
                processes: int = 0) -> Generator[Page, None, None]:
    """The job's pages from `first` on (at most the number recorded), each recorded if
    new, and each checked after it was read: the job unchanged (not purged, not retried)
    and its bytes as recorded, else ResultsChanged. `processes` (forked) read pages
    ahead; close it when stopping early."""
    sessions = db.sessions(url)
    version = version_of(job)
    recorded = _recorded(sessions, job.id, version)
    lasts = [0] + [page.last for page in recorded]
    bounds = list(zip(lasts[first:], lasts[first + 1:], strict=False))
    bounds += page_bounds(sessions, job.id, lasts[-1])
    processes = forkable(min(processes, len(bounds) - 1))
    if processes:
        db.db_engine(url).dispose()  # a forked process must open connections of its own
    pages = checked(url, job, ordered_map(_PageBytes(url, job_fields(job)), bounds,
                                          processes))
    with closing(pages):
        for number, (data, digests) in enumerate(pages, start=first):
            if number >= len(recorded):
                _record(sessions, job.id, version, number, bounds[number - first][1], data,
                        digests)
            elif (recorded[number].sizes, recorded[number].digests) != \
                    (tuple(len(d) for d in data), digests):
                _forget(sessions, job.id, version)
                raise ResultsChanged(f"job {job.id}'s results changed while they were read "
                                     f"(page {number} differs from its first reading)")
            yield Page(number, data, digests)


def file_bytes(url: str, job: Job, index: FileIndex, start: int = 0, stop: int | None = None,
               processes: int = 0) -> Iterator[bytes]:
    """Bytes [start, stop) of the file `index` describes, a page at a time."""
    stop = index.size if stop is None else stop
    if start >= stop:
        return
    column = KINDS.index(index.kind)
    starts = index.starts()
    first = index.page_at(start)
    with closing(page_stream(url, job, first, processes)) as pages:
        for page in pages:
            offset, data = starts[page.number], page.data[column]
            piece = data[max(0, start - offset):stop - offset]
            if piece:
                yield piece
            if offset + len(data) >= stop:
                return
    raise ResultsChanged(f"job {job.id}'s results have fewer pages than when first read")


@dataclass(frozen=True)
class _PageBytes:
    """One page's three files' bytes and digests (run in a forked process, or here)."""

    url: str
    job: JobFields

    def __call__(self, bounds: Bounds
                 ) -> tuple[tuple[bytes, bytes, bytes], tuple[str, str, str]]:
        """Each line is encoded once and joined into the three files' pages: memory is
        about three times the page's bytes (results.PAGE_BYTES and a line), never the
        file's."""
        encoded: list[tuple[bytes, bool]] = []
        for line in lines(self.job, page_rows(db.sessions(self.url), self.job.id, bounds),
                          False):
            encoded.append(((dumps(line) + "\n").encode(), line["error"] is not None))
        data = (b"".join(text for text, _ in encoded),
                b"".join(text for text, failed in encoded if not failed),
                b"".join(text for text, failed in encoded if failed))
        del encoded
        return data, (_sha(data[0]), _sha(data[1]), _sha(data[2]))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Recorded(NamedTuple):
    last: int  # the page's last line (`result_pages.page`): its lines follow the page before
    sizes: tuple[int, ...]
    digests: tuple[str, ...]


def _recorded(sessions: sessionmaker[Session], job_id: str, version: str) -> list[Recorded]:
    with sessions() as session:
        rows = session.execute(select(ResultPage).where(
            ResultPage.job_id == job_id, ResultPage.version == version)
            .order_by(ResultPage.page)).scalars()
        return [Recorded(row.page, (row.all_bytes, row.output_bytes, row.errors_bytes),
                         (row.all_sha256, row.output_sha256, row.errors_sha256))
                for row in rows]


def _record(sessions: sessionmaker[Session], job_id: str, version: str, number: int,
            last: int, data: tuple[bytes, bytes, bytes], digests: tuple[str, str, str]
            ) -> None:
    """Record page `number`, keyed by its last line (another reader may have just done
    it: then theirs stays); a new version's first page drops the rows of the job's older
    versions."""
    try:
        with sessions.begin() as session:
            if number == 0:
                session.execute(delete(ResultPage).where(ResultPage.job_id == job_id,
                                                         ResultPage.version != version))
            session.add(ResultPage(
                job_id=job_id, version=version, page=last, all_bytes=len(data[0]),
                output_bytes=len(data[1]), errors_bytes=len(data[2]),
                all_sha256=digests[0], output_sha256=digests[1], errors_sha256=digests[2]))
    except IntegrityError:
        pass


def _forget(sessions: sessionmaker[Session], job_id: str, version: str) -> None:
    with sessions.begin() as session:
        session.execute(delete(ResultPage).where(ResultPage.job_id == job_id,
                                                 ResultPage.version == version))
