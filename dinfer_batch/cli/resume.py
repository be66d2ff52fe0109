"""`dinfer-batch results -o FILE` that resumes: the file is written under a hidden partial
name beside FILE, `.FILE.<tag>.partial` (tag: the job and its content version), and
renamed to FILE once whole. A run that stops (killed, connection lost, disk full) leaves
the partial; the same command later appends to it from its length, reading only the
items from the page that holds that byte on (jobs/reading/result_pages.py records each page's
size as it is first read), and then checks the whole file against the pages' recorded
digests: FILE ends byte-identical to one clean run, or the run starts over."""

from __future__ import annotations

import hashlib
import os
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import click

from dinfer_batch.errors import CannotWrite
from dinfer_batch.jobs.reading.result_pages import KINDS, page_stream, recorded_prefix
from dinfer_batch.jobs.reading.results import ResultsChanged, version_of
from dinfer_batch.storage.tables import Job


@dataclass
class Target:
    path: Path
    kind: str  # one of KINDS
    partial: Path = field(init=False)
    offset: int = 0  # bytes already in the partial

    def column(self) -> int:
        return KINDS.index(self.kind)


def partial_path(path: Path, job: Job) -> Path:
    """Where the results of `job` (at its current version) bound for `path` are written
    until whole."""
    tag = hashlib.sha256(f"{job.id}:{version_of(job)}".encode()).hexdigest()[:16]
    return path.with_name(f".{path.name}.{tag}.partial")


def write_resumable(url: str, job: Job, targets: list[Target], processes: int) -> None:
    for target in targets:
        target.partial = partial_path(target.path, job)
        target.offset = target.partial.stat().st_size if target.partial.exists() else 0
    resumed = any(target.offset for target in targets)
    try:
        if resumed:
            for target in targets:
                click.echo(f"resuming {target.path} from byte {target.offset} "
                           f"({target.partial.name})", err=True)
        _append(url, job, targets, processes)
        if resumed and not all(_whole(url, job, target) for target in targets):
            click.echo("the partial file differs from the results; writing it again",
                       err=True)
            for target in targets:
                target.partial.unlink()
                target.offset = 0
            _append(url, job, targets, processes)
        for target in targets:
            target.partial.replace(target.path)
    except ResultsChanged:
        for target in targets:
            target.partial.unlink(missing_ok=True)
        raise
    except OSError as exc:  # the partial stays, for the next run to resume
        named = {str(target.partial): target.path for target in targets}
        alone = targets[0].path if len(targets) == 1 else None  # a write names no file
        where = named.get(str(exc.filename)) or alone or exc.filename or "the results"
        raise CannotWrite(f"cannot write {where}: {exc.strerror or exc}; run the same "
                          "command again to resume") from exc


def _append(url: str, job: Job, targets: list[Target], processes: int) -> None:
    """Write each target's bytes from its offset on, from the first page any needs."""
    sizes = [size for size, _ in recorded_prefix(url, job)]
    first = min(_page_of(sizes, target.column(), target.offset) for target in targets)
    starts = [_start(sizes, target.column(), first) for target in targets]
    handles: list[IO[bytes]] = []
    try:
        for target in targets:
            handles.append(target.partial.open("ab"))
        with closing(page_stream(url, job, first, processes)) as pages:
            for page in pages:
                for index, target in enumerate(targets):
                    data = page.data[target.column()]
                    skip = max(0, target.offset - starts[index])
                    if skip < len(data):
                        handles[index].write(data[skip:] if skip else data)
                    starts[index] += len(data)
        for handle in handles:
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        for handle in handles:
            handle.close()


def _page_of(sizes: list[tuple[int, ...]], column: int, offset: int) -> int:
    """The recorded page holding byte `offset`; the page after the recorded ones when
    the offset is at their end (a partial is never longer than the pages recorded before
    it was written: a page is recorded before it is written)."""
    at = 0
    for page, size in enumerate(sizes):
        if offset < at + size[column]:
            return page
        at += size[column]
    return len(sizes)


def _start(sizes: list[tuple[int, ...]], column: int, page: int) -> int:
    return sum(size[column] for size in sizes[:page])


def _whole(url: str, job: Job, target: Target) -> bool:
    """The partial is, page by page, the bytes whose digests were recorded."""
    with target.partial.open("rb") as handle:
        for size, digest in recorded_prefix(url, job):
            sha = hashlib.sha256()
            left = size[target.column()]
            while left:
                block = handle.read(min(left, 1 << 20))
                if not block:
                    return False
                sha.update(block)
                left -= len(block)
            if sha.hexdigest() != digest[target.column()]:
                return False
        return handle.read(1) == b""

