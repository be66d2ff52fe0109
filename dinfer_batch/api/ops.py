"""Operations endpoints: `/healthz` (the process answers), `/readyz` (database and broker
reachable, else 503) and `/metrics` (Prometheus text format, for admin keys). The metrics
are read from SQL on each scrape, so every API replica reports the same totals and nothing
is lost when one restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.auth import admin, sessions
from dinfer_batch.api.errors import documented, error_response
from dinfer_batch.jobs.lifecycle import STATUSES
from dinfer_batch.storage.tables import Chunk, Job

RATE_WINDOW_S = 60.0
router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database or broker unreachable"}})
def readyz(request: Request) -> JSONResponse:
    from workers.tasks import check_broker

    try:
        with sessions(request)() as session:
            session.execute(text("SELECT 1"))
        check_broker()
    except Exception as exc:  # any reason not to send traffic here is a 503
        return error_response(503, f"not ready: {type(exc).__name__}: {exc}")
    return JSONResponse({"status": "ready"})


@router.get("/metrics", response_class=Response, dependencies=[Depends(admin)],
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}} | documented(401, 403))
def metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(sessions(request)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class JobCollector:
    def __init__(self, database: sessionmaker[Session]) -> None:
        self.database = database

    def collect(self) -> Iterator[Metric]:
        with self.database() as session:
            by_status = {status: count for status, count in session.execute(
                select(Job.status, func.count()).group_by(Job.status))}
            completed, failed, tokens = session.execute(select(
                func.coalesce(func.sum(Job.completed_count), 0),
                func.coalesce(func.sum(Job.failed_count), 0),
                func.coalesce(func.sum(Job.completion_tokens), 0))).one()
            since = time.time() - RATE_WINDOW_S
            rates = session.execute(
                select(Job.model, func.sum(Chunk.completion_tokens))
                .select_from(Chunk).join(Job, Job.id == Chunk.job_id)
                .where(Chunk.finished_at >= since).group_by(Job.model)).all()
            queued = session.execute(
                select(Job.queue, func.count()).select_from(Chunk)
                .join(Job, Job.id == Chunk.job_id)
                .where(Chunk.status == "queued").group_by(Job.queue)).all()
        jobs = GaugeMetricFamily("dinfer_batch_jobs", "Jobs by status", labels=["status"])
        for status in STATUSES:
            jobs.add_metric([status], by_status.get(status, 0))
        yield jobs
        items = CounterMetricFamily("dinfer_batch_items", "Requests that ended, by outcome",
                                    labels=["outcome"])
        items.add_metric(["completed"], int(completed))  # PostgreSQL sums are Decimals
        items.add_metric(["failed"], int(failed))
        yield items
        yield CounterMetricFamily("dinfer_batch_completion_tokens",
                                  "Tokens generated, all jobs", value=int(tokens))
        speed = GaugeMetricFamily("dinfer_batch_tokens_per_second",
                                  f"Tokens generated per second over the last "
                                  f"{RATE_WINDOW_S:.0f} s, per model", labels=["model"])
        for model, generated in rates:
            speed.add_metric([model], int(generated or 0) / RATE_WINDOW_S)
        yield speed
        chunks = GaugeMetricFamily("dinfer_batch_queued_chunks", "Chunks waiting, per queue",
                                   labels=["queue"])
        for queue, count in queued:
            chunks.add_metric([queue], count)
        yield chunks
        yield GaugeMetricFamily("dinfer_batch_live_workers",
                                "Workers answering a ping on the broker", value=_live_workers())


def _live_workers() -> int:
    from workers.celery_app import app

    try:
        return len(app.control.ping(timeout=0.5))
    except Exception:  # an unreachable broker has no live workers
        return 0
