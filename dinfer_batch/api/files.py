"""`/v1/files`: uploads streamed to the files directory (never whole in memory; owner-only
files, and none left without its row), and the virtual result files of ended batches,
served line by line from SQL. An upload past its `expires_after`, or a result file past
its batch's `output_expires_after`, is a 404 at once; `beat` deletes it
(jobs/retention.py)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import Response
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.auth import app_settings, owner, sessions
from dinfer_batch.api.errors import ApiError, documented
from dinfer_batch.api.ranges import RANGE_RESPONSES, file_reader, ranged
from dinfer_batch.api.schemas import FileDeleted, FileList, FileObject, list_page
from dinfer_batch.config import Settings
from dinfer_batch.errors import NotFound
from dinfer_batch.formats.limits import MAX_FILENAME, BadValue, check_text
from dinfer_batch.jobs import retention
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.reading.result_pages import FileIndex, file_bytes, file_index
from dinfer_batch.jobs.reading.result_sizes import result_sizes
from dinfer_batch.jobs.reading.view import parse_result_file_id, result_file_id
from dinfer_batch.storage import db, tables
from dinfer_batch.storage.tables import Job

COPY_BYTES = 1 << 20
ORPHAN_GRACE_S = 600.0
EXPIRES_MIN_S, EXPIRES_MAX_S = 3600, 30 * 86400  # OpenAI's bounds for expires_after
router = APIRouter(prefix="/v1/files", tags=["files"])


@router.post("", response_model=FileObject, responses=documented(400, 401, 413))
def upload(file: UploadFile = File(...), purpose: Literal["batch"] = Form(...),
           anchor: Literal["created_at"] | None = Form(None, alias="expires_after[anchor]"),
           seconds: int | None = Form(None, alias="expires_after[seconds]",
                                      ge=EXPIRES_MIN_S, le=EXPIRES_MAX_S),
           who: str = Depends(owner),
           database: sessionmaker[Session] = Depends(sessions),
           config: Settings = Depends(app_settings)) -> dict:
    """Upload a JSONL batch input file (multipart: `file`, `purpose=batch`, and optionally
    `expires_after[anchor]=created_at` with `expires_after[seconds]`: the file is deleted
    that long after its upload)."""
    if (anchor is None) != (seconds is None):
        raise ApiError(400, "expires_after needs both anchor (created_at) and seconds",
                       "expires_after")
    try:
        filename = check_text("filename", Path(file.filename or "upload").name, MAX_FILENAME)
        if not filename.isprintable():
            raise BadValue("filename contains a control character")
    except BadValue as exc:
        raise ApiError(400, str(exc), "file", "invalid_filename") from exc
    file_id = f"file-{uuid.uuid4().hex}"
    directory = config.files_dir
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / file_id
    try:
        size = _copy(file, target, config.max_file_bytes)
        now = time.time()
        row = tables.File(id=file_id, owner=who, filename=filename, purpose=purpose,
                          bytes=size, path=str(target), created_at=now,
                          expires_at=None if seconds is None else now + seconds)
        with database.begin() as session:
            session.add(row)
    except BaseException:  # no bytes stay on disk without their row
        target.unlink(missing_ok=True)
        raise
    return _file_object(row)


def _copy(upload: UploadFile, target: Path, limit: int) -> int:
    """Copy to a new owner-only (0600) file; 413 past `limit` bytes, 400 when empty."""
    size = 0
    with os.fdopen(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as out:
        while chunk := upload.file.read(COPY_BYTES):
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the file is larger than the limit of {limit} bytes "
                                    "(DINFER_BATCH_MAX_FILE_BYTES)", "file", "file_too_large")
            out.write(chunk)
    if size == 0:
        raise ApiError(400, "the file is empty", "file", "empty_file")
    return size


def remove_orphans(config: Settings, grace_s: float = ORPHAN_GRACE_S) -> int:
    """Delete the files directory's files that no row names and that nobody wrote to for
    `grace_s` (a server killed mid-upload leaves its partial copy; another replica's
    upload in flight is younger than that). Returns how many went."""
    directory = config.files_dir
    if not directory.is_dir():
        return 0
    with db.ready_for(config)() as session:
        known = {Path(path).name for path in session.scalars(select(tables.File.path))}
    removed, now = 0, time.time()
    for path in directory.iterdir():
        with suppress(OSError):
            if (path.name.startswith("file-") and path.name not in known and path.is_file()
                    and now - path.stat().st_mtime > grace_s):
                path.unlink()
                removed += 1
    return removed


@router.get("", response_model=FileList, responses=documented(400, 401))
def list_files(purpose: str | None = None, limit: int = Query(10_000, ge=1, le=10_000),
               after: str | None = Query(None, max_length=64),
               order: Literal["asc", "desc"] = "desc", who: str = Depends(owner),
               database: sessionmaker[Session] = Depends(sessions)) -> dict:
    """Your uploaded files, newest first (`order=asc` for oldest first)."""
    query = select(tables.File).where(tables.File.owner == who, or_(
        tables.File.expires_at.is_(None), tables.File.expires_at > time.time()))
    if purpose:
        query = query.where(tables.File.purpose == purpose)
    keys = (tables.File.created_at, tables.File.id)
    with database() as session:
        if after is not None:
            cursor = session.get(tables.File, after)
            if cursor is None or cursor.owner != who:
                raise ApiError(400, f"after: no file with id {after!r}", "after")
            edge = (cursor.created_at, cursor.id)
            past = [key < value if order == "desc" else key > value
                    for key, value in zip(keys, edge, strict=True)]
            query = query.where(or_(past[0], (keys[0] == edge[0]) & past[1]))
        ordered = [k.desc() if order == "desc" else k.asc() for k in keys]
        rows = list(session.scalars(query.order_by(*ordered).limit(limit + 1)))
    return list_page([_file_object(row) for row in rows], limit)


@router.get("/{file_id}", response_model=FileObject, responses=documented(401, 404))
def get_file(file_id: str, who: str = Depends(owner),
             database: sessionmaker[Session] = Depends(sessions)) -> dict:
    result = _result_file(database, file_id, who)
    if result is not None:
        job, failed = result
        output_bytes, error_bytes = result_sizes(database, job)  # stored when it ended
        return {"id": file_id, "object": "file",
                "bytes": error_bytes if failed else output_bytes, "purpose": "batch_output",
                "filename": f"{job.id}_{'errors' if failed else 'output'}.jsonl",
                "created_at": int(_ended_at(job)), "status": "processed",
                "expires_at": None if job.output_expires_after is None
                else int(_ended_at(job) + job.output_expires_after)}
    return _file_object(_uploaded(database, file_id, who))


@router.api_route("/{file_id}/content", methods=["GET", "HEAD"], response_class=Response,
                  responses={**RANGE_RESPONSES, **documented(401, 404, 409, 416)})
def file_content(request: Request, file_id: str, who: str = Depends(owner),
                 database: sessionmaker[Session] = Depends(sessions)) -> Response:
    """The file's bytes, streamed: an upload as it was sent, a result file as JSONL. HEAD
    gives its Content-Length and ETag; `Range: bytes=START-END` (or `START-`, `-LAST`)
    gets that part with 206, so that a dropped download resumes where it stopped."""
    result = _result_file(database, file_id, who)
    if result is not None:
        job, failed = result
        url = app_settings(request).database_url
        index = result_index(url, job, failed)
        return ranged(request, index.size, index.etag, result_reader(url, job, index),
                      "application/octet-stream")
    path = Path(_uploaded(database, file_id, who).path)
    if not path.is_file():
        raise ApiError(404, f"the content of {file_id} is gone from the files directory")
    return ranged(request, path.stat().st_size, file_id, file_reader(str(path)),
                  "application/octet-stream")


def result_index(url: str, job: Job, failed: bool) -> FileIndex:
    """The index of an ended job's output (or error) file in the database at `url`: its
    pages' sizes and digests, read once (a pass over the job's items) and kept in SQL."""
    return file_index(url, job, "errors" if failed else "output")


def result_reader(url: str, job: Job, index: FileIndex) -> Callable[[int, int], Iterator[bytes]]:
    return lambda start, stop: file_bytes(url, job, index, start, stop)


@router.delete("/{file_id}", response_model=FileDeleted, responses=documented(401, 404))
def delete_file(file_id: str, who: str = Depends(owner),
                database: sessionmaker[Session] = Depends(sessions)) -> dict:
    """Delete an upload (batches made from it keep their requests: they live in SQL), or
    a batch's output or error file: both are views of the batch's stored requests and
    results, which are deleted (as `dinfer-batch delete` does); the batch object stays."""
    result = _result_file(database, file_id, who)
    if result is not None:
        retention.delete_job(database, result[0].id, who)
    else:
        retention.delete_file(database, _uploaded(database, file_id, who).id)
    return {"id": file_id, "object": "file", "deleted": True}


def _uploaded(database: sessionmaker[Session], file_id: str, who: str) -> tables.File:
    with database() as session:
        row = session.get(tables.File, file_id)
    if row is None or row.owner != who or retention.file_gone(row):
        raise ApiError(404, f"no file with id {file_id!r}", "file_id")
    return row


def uploaded_path(database: sessionmaker[Session], file_id: str, who: str) -> Path:
    """The stored bytes of the caller's upload `file_id` (404 otherwise)."""
    return Path(_uploaded(database, file_id, who).path)


def _result_file(database: sessionmaker[Session], file_id: str,
                 who: str) -> tuple[Job, bool] | None:
    """(job, holds failed lines) for a result file id; None for other ids; 404 when the
    batch is not the caller's or has no such file (yet)."""
    parsed = parse_result_file_id(file_id)
    if parsed is None:
        return None
    job_id, failed = parsed
    try:
        job = get_job(database, job_id, who)
    except NotFound:
        job = None
    if (job is None or result_file_id(job, "errors" if failed else "output") != file_id
            or retention.result_gone(job)):
        raise ApiError(404, f"no file with id {file_id!r}", "file_id")
    return job, failed


def _ended_at(job: Job) -> float:
    return (job.completed_at or job.failed_at or job.cancelled_at or job.expired_at
            or job.created_at)


def _file_object(row: tables.File) -> dict:
    return {"id": row.id, "object": "file", "bytes": row.bytes,
            "created_at": int(row.created_at), "filename": row.filename,
            "purpose": row.purpose, "status": "processed",
            "expires_at": None if row.expires_at is None else int(row.expires_at)}


