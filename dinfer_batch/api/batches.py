"""`/v1/batches`: a batch is a job made from an uploaded file through jobs.create, as
`dinfer-batch submit` makes one; reads and cancel go through the same
lifecycle code as the CLI, scoped to the caller's owner."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.auth import app_broker, app_settings, owner, sessions
from dinfer_batch.api.errors import ApiError, client_text, documented
from dinfer_batch.api.files import uploaded_path
from dinfer_batch.api.schemas import Batch, BatchCreate, BatchList, list_page
from dinfer_batch.config import DEFAULT_CHUNK_SIZE, Settings
from dinfer_batch.errors import NotFound, UserError
from dinfer_batch.jobs import queueing, retention
from dinfer_batch.jobs.create import create_job, make_spec
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.intake.entitlements import check_job, owner_entitlements
from dinfer_batch.jobs.lifecycle import list_jobs
from dinfer_batch.jobs.reading.place import Place, place, places
from dinfer_batch.jobs.reading.view import job_object
from dinfer_batch.jobs.spec import JobOptions, parse_priority
from dinfer_batch.storage.tables import Job
from dinfer_workers.broker import Broker

router = APIRouter(prefix="/v1/batches", tags=["batches"])


@router.post("", response_model=Batch, responses=documented(400, 401, 403, 404, 413, 429, 503))
def create_batch(body: BatchCreate, who: str = Depends(owner),
                 database: sessionmaker[Session] = Depends(sessions),
                 config: Settings = Depends(app_settings),
                 broker: Broker = Depends(app_broker)) -> dict:
    """Validate the uploaded file into a batch and queue it. Lines that are not valid
    requests fail alone (see the batch's error file); the rest run. `priority` (low,
    normal, high or an integer; through the openai client's `extra_body`) orders the
    queue, up to the key's `max_priority` (403 above it; `chunk_size`, in generations,
    likewise up to `max_chunk_size`); a batch that would pass its owner's enqueued
    requests or tokens limit gets 429, and nothing is queued."""
    path = uploaded_path(database, body.input_file_id, who)
    params = dict(body.model_extra or {})
    try:
        priority = parse_priority(params.pop("priority", None))
    except UserError as exc:
        raise ApiError(400, str(exc), "priority", "invalid_value") from exc
    entitled = owner_entitlements(database, who, config)
    chunk_size = body.chunk_size or min(DEFAULT_CHUNK_SIZE,
                                        entitled.max_chunk_size or DEFAULT_CHUNK_SIZE)
    check_job(entitled, priority, chunk_size)  # 403 before the file is read
    spec = make_spec(_model(body.model, config.api_models), params, JobOptions(
        queue=config.default_queue, chunk_size=chunk_size, metadata=body.metadata or {},
        owner=who, endpoint=body.endpoint, input_file_id=body.input_file_id,
        completion_window=body.completion_window, priority=priority, entitled=entitled),
        config.model_dir)
    job = create_job(database, broker, path, spec, config)
    if body.output_expires_after is not None:
        retention.set_output_expiry(database, job.id, body.output_expires_after.seconds)
        job = get_job(database, job.id)  # the object shows it, as OpenAI's does
    return _batch(job, database, config)


def _batch(job: Job, database: sessionmaker[Session], config: Settings,
           where: Place | str = "") -> dict:
    """The job object as a client sees it, with its place in the queue (`where`, else
    read)."""
    where = place(database, job) if where == "" else where
    shown = job_object(job, where, for_client=True)
    if shown["errors"]:  # a job's error may quote a server's message
        dirs = config.server_dirs()
        shown["errors"]["data"] = [{"message": client_text(error["message"], dirs)}
                                   for error in shown["errors"]["data"]]
    return shown


def _model(name: str | None, offered: tuple[str, ...]) -> str:
    """The `offered` model (DINFER_BATCH_API_MODELS) that `name` names (its path or
    directory name)."""
    if name is None:
        return offered[0]
    for path in offered:
        if name in (path, Path(path).name):
            return path
    names = ", ".join(Path(path).name for path in offered)
    raise ApiError(400, f"model {name!r} is not offered by this server; choose one of {names}",
                   "model", "model_not_found")


@router.get("", response_model=BatchList, responses=documented(400, 401))
def list_batches(limit: int = Query(20, ge=1, le=100),
                 after: str | None = Query(None, max_length=64), who: str = Depends(owner),
                 database: sessionmaker[Session] = Depends(sessions),
                 config: Settings = Depends(app_settings)) -> dict:
    """Your batches, newest first; `after` is the last id of the previous page."""
    try:
        jobs = list_jobs(database, None, limit + 1, owner=who, after=after)
    except NotFound as exc:
        raise ApiError(400, f"after: no batch with id {after!r}", "after") from exc
    where = places(database, jobs)  # a few queries for the page, whatever is queued
    return list_page([_batch(job, database, config, where[job.id]) for job in jobs], limit)


@router.get("/{batch_id}", response_model=Batch, responses=documented(401, 404))
def get_batch(batch_id: str, who: str = Depends(owner),
              database: sessionmaker[Session] = Depends(sessions),
              config: Settings = Depends(app_settings)) -> dict:
    return _batch(_job(database, batch_id, who), database, config)


@router.post("/{batch_id}/cancel", response_model=Batch, responses=documented(401, 404, 409))
def cancel_batch(batch_id: str, who: str = Depends(owner),
                 database: sessionmaker[Session] = Depends(sessions),
                 config: Settings = Depends(app_settings)) -> dict:
    """Queued requests are dropped, running ones stop at their next engine batch; the
    batch is `cancelling` until then, `cancelled` after. Finished results stay."""
    _job(database, batch_id, who)
    return _batch(queueing.cancel(database, batch_id, who), database, config)


def _job(database: sessionmaker[Session], batch_id: str, who: str) -> Job:
    try:
        return get_job(database, batch_id, who)
    except NotFound as exc:
        raise ApiError(404, f"no batch with id {batch_id!r}", "batch_id") from exc
