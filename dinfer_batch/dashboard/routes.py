"""The dashboard's pages. Every read goes through the functions the CLI and the API use
(`list_jobs`, `get_job`, `queueing.cancel/retry`, `recent_workers`, `list_schedules`...),
scoped as the API scopes them: an owner's key sees that owner's jobs, and another owner's
job is not found (404); an admin key sees every job and the fleet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.auth import app_broker, app_settings, sessions
from dinfer_batch.api.errors import status_of
from dinfer_batch.api.files import result_index, result_reader
from dinfer_batch.api.keys import Caller, caller_of
from dinfer_batch.api.ranges import ranged
from dinfer_batch.dashboard import present
from dinfer_batch.dashboard.access import local_path, page_caller, same_origin, sign_in, sign_out
from dinfer_batch.dashboard.queries import first_failures, status_counts, timeline, waiting
from dinfer_batch.errors import NotFound, UserError
from dinfer_batch.jobs import queueing
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.lifecycle import list_jobs
from dinfer_batch.jobs.reading.view import result_file_id
from dinfer_batch.jobs.retention import result_gone
from dinfer_batch.schedules.store import iso, list_schedules, runs_of
from dinfer_batch.statuses import ENDED, STATUSES, JobStatus
from dinfer_batch.storage.registry import live_rates, recent_workers, state_of
from dinfer_batch.storage.tables import Job

HERE = Path(__file__).parent
PAGE_SIZE = 50
REFRESH_S = 3
STATIC = {"dashboard.css": "text/css", "refresh.js": "text/javascript"}
SECURITY_HEADERS = {
    # no inline script or style, nothing from another origin, forms post here only
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
ACTIONS = {"cancel": "Cancel", "retry": "Retry"}

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.globals.update(duration=present.duration, model_name=present.model_name,
                             short_id=present.short_id,
                             iso=iso, statuses=STATUSES, ended=ENDED,
                             cancelling=JobStatus.CANCELLING)


class SignInNeeded(Exception):
    """No key, or a revoked one: off to the sign-in page, and back here after it."""


class PageError(Exception):
    """A page's answer other than 200, shown as a page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def install(app: FastAPI) -> None:
    """Serve the dashboard on `app`: its routes, the way to the sign-in page, and its
    error pages (HTML; the API's errors keep OpenAI's JSON shape)."""

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, _exc: SignInNeeded) -> Response:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/signin?next={quote(here, safe='')}", status_code=303)

    @app.exception_handler(PageError)
    async def _page_error(request: Request, exc: PageError) -> Response:
        who = page_caller(request, sessions(request))
        return page(request, "error.html", who, exc.status, message=exc.message,
                    title=f"{exc.status}")

    app.include_router(router)


def signed_in(request: Request, database: sessionmaker[Session] = Depends(sessions)) -> Caller:
    who = page_caller(request, database)
    if who is None:
        raise SignInNeeded
    return who


def page(request: Request, name: str, who: Caller | None, status: int = 200,
         **context: object) -> HTMLResponse:
    return templates.TemplateResponse(
        request, name, {"who": who, "auth": request.app.state.auth, **context},
        status_code=status, headers=SECURITY_HEADERS | {"Cache-Control": "no-store"})


@router.get("/", response_class=HTMLResponse)
def jobs_page(request: Request, status: str = Query("", max_length=16),
              owner: str = Query("", max_length=200),
              after: str | None = Query(None, max_length=64),
              who: Caller = Depends(signed_in),
              database: sessionmaker[Session] = Depends(sessions)) -> HTMLResponse:
    """Newest first, PAGE_SIZE a page; `after` is the last job of the previous page."""
    if status and status not in STATUSES:
        raise PageError(400, f"status must be one of {', '.join(STATUSES)}; got {status!r}")
    scope = (owner or None) if who.admin else who.owner
    try:
        jobs = list_jobs(database, status or None, PAGE_SIZE + 1, owner=scope, after=after)
    except NotFound as exc:
        raise PageError(400, f"after: no job with id {after!r}") from exc
    shown = jobs[:PAGE_SIZE]
    rates = live_rates(database, [job.id for job in shown],
                       app_settings(request).worker_timeout)
    filters = {"status": status, "owner": owner if who.admin else ""}
    following = None
    if len(jobs) > PAGE_SIZE:
        following = "/?" + urlencode({k: v for k, v in filters.items() if v}
                                     | {"after": shown[-1].id})
    return page(request, "jobs.html", who, title="Jobs", refresh=REFRESH_S,
                rows=[present.job_row(job, rates.get(job.id)) for job in shown],
                counts=status_counts(database, scope), filters=filters, first_page=after,
                following=following)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, who: Caller = Depends(signed_in),
             database: sessionmaker[Session] = Depends(sessions)) -> HTMLResponse:
    job = _job(database, job_id, who)
    rate = live_rates(database, [job.id], app_settings(request).worker_timeout).get(job.id)
    return page(request, "job.html", who, title=job.id, refresh=REFRESH_S,
                row=present.job_row(job, rate), job=job,
                charts=present.charts(timeline(database, job)),
                failures=first_failures(database, job),
                params=present.params_text(job.params),
                metadata=sorted((job.meta or {}).items()),
                files=[kind for kind in ("output", "errors") if _has_file(job, kind)])


@router.get("/jobs/{job_id}/{action}", response_class=HTMLResponse)
def confirm_page(request: Request, job_id: str, action: Literal["cancel", "retry"],
                 who: Caller = Depends(signed_in),
                 database: sessionmaker[Session] = Depends(sessions)) -> HTMLResponse:
    """The confirmation step before a cancel or a retry (a plain form: no JavaScript)."""
    job = _job(database, job_id, who)
    return page(request, "confirm.html", who, title=f"{ACTIONS[action]} {job.id}", job=job,
                action=action, verb=ACTIONS[action], row=present.job_row(job, None))


@router.post("/jobs/{job_id}/{action}")
def act(request: Request, job_id: str, action: Literal["cancel", "retry"],
        who: Caller = Depends(signed_in),
        database: sessionmaker[Session] = Depends(sessions)) -> Response:
    _check_origin(request)
    job = _job(database, job_id, who)
    try:
        if action == "cancel":
            queueing.cancel(database, job.id, job.owner)
        else:
            queueing.retry(database, app_broker(request), job.id, app_settings(request))
    except UserError as exc:  # WrongState 409, Unavailable 503 (no broker), ...
        raise PageError(status_of(exc), str(exc)) from exc
    return RedirectResponse(f"/jobs/{quote(job.id)}", status_code=303)


@router.api_route("/jobs/{job_id}/files/{kind}", methods=["GET", "HEAD"])
def download(request: Request, job_id: str, kind: Literal["output", "errors"],
             who: Caller = Depends(signed_in),
             database: sessionmaker[Session] = Depends(sessions)) -> Response:
    """The lines `dinfer-batch results --errors` writes (the API's result files), with
    HEAD and Range as the API's (api/ranges.py)."""
    job = _job(database, job_id, who)
    if not _has_file(job, kind):
        raise PageError(404, f"job {job.id} has no {kind} file (not yet, or not any more)")
    url = app_settings(request).database_url
    index = result_index(url, job, kind == "errors")
    return ranged(request, index.size, index.etag, result_reader(url, job, index),
                  "application/jsonl",
                  {"Content-Disposition": f'attachment; filename="{job.id}_{kind}.jsonl"'})


def _has_file(job: Job, kind: str) -> bool:
    """As the API: an ended job's file, unless its results were deleted or expired."""
    return result_file_id(job, kind) is not None and not result_gone(job)


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(request: Request, who: Caller = Depends(signed_in),
               database: sessionmaker[Session] = Depends(sessions)) -> HTMLResponse:
    if not who.admin:
        raise PageError(403, "the fleet is shown to admin keys only "
                             "(`dinfer-batch keys create NAME --admin`)")
    workers = recent_workers(database)
    schedules = [(schedule, runs_of(database, schedule.name, 3))
                 for schedule in list_schedules(database)]
    return page(request, "fleet.html", who, title="Fleet", refresh=REFRESH_S,
                workers=[(worker, state_of(worker, app_settings(request).worker_timeout))
                         for worker in workers],
                waiting=waiting(database), schedules=schedules, now=time.time())


@router.get("/signin", response_class=HTMLResponse)
def sign_in_page(request: Request, next: str = Query("/", max_length=2000),  # noqa: A002
                 database: sessionmaker[Session] = Depends(sessions)) -> Response:
    if page_caller(request, database) is not None:
        return RedirectResponse(local_path(next), status_code=303)
    return page(request, "signin.html", None, title="Sign in", next=local_path(next))


@router.post("/signin")
def sign_in_form(request: Request, key: str = Form("", max_length=500),
                 next: str = Form("/", max_length=2000),  # noqa: A002
                 database: sessionmaker[Session] = Depends(sessions)) -> Response:
    _check_origin(request)
    if caller_of(database, key.strip()) is None:
        return page(request, "signin.html", None, 401, title="Sign in", next=local_path(next),
                    message="invalid or revoked API key")
    response = RedirectResponse(local_path(next), status_code=303)
    sign_in(response, request, key.strip())
    return response


@router.post("/signout")
def sign_out_form(request: Request) -> Response:
    _check_origin(request)
    response = RedirectResponse("/signin", status_code=303)
    sign_out(response)
    return response


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise PageError(404, f"no file {name!r}")
    return Response((HERE / "static" / name).read_bytes(), media_type=STATIC[name],
                    headers=SECURITY_HEADERS | {"Cache-Control": "max-age=300"})


def _job(database: sessionmaker[Session], job_id: str, who: Caller) -> Job:
    try:
        return get_job(database, job_id, None if who.admin else who.owner)
    except NotFound as exc:
        raise PageError(404, f"no job with id {job_id!r}") from exc


def _check_origin(request: Request) -> None:
    if not same_origin(request):
        raise PageError(403, "this form must be sent from the dashboard's own pages "
                             "(its Origin header names another site, or none)")
