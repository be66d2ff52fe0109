"""Operations endpoints: `/healthz` (the process answers), `/readyz` (database and broker
reachable, else 503) and `/metrics` (Prometheus text format, for admin keys, or for anyone
with DINFER_BATCH_METRICS_PUBLIC=1). None of them waits on the database or the broker in
the request: readiness comes from a background probe and metrics from a short cache
(api/probes.py). The metrics are read from SQL, so every API replica reports the same
totals and nothing is lost when one restarts; live workers are counted from the same SQL
heartbeats as `dinfer-batch workers`, and models are named by their names, never by a
path of this machine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import PurePath

from anyio import to_thread
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.auth import admin, sessions
from dinfer_batch.api.errors import documented, error_response, server_dirs
from dinfer_batch.api.probes import Cached
from dinfer_batch.statuses import STATUSES, ChunkStatus
from dinfer_batch.storage.registry import live_count, live_workers
from dinfer_batch.storage.tables import Chunk, Job

RATE_WINDOW_S = 60.0
router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database or broker unreachable"}})
async def readyz(request: Request) -> JSONResponse:
    reason = request.app.state.readiness.verdict()
    if reason is not None:
        return error_response(503, f"not ready: {reason}", dirs=server_dirs(request.app))
    return JSONResponse({"status": "ready"})


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **documented(401, 403)})
async def metrics(request: Request) -> Response:
    """In the event loop while the cached value is fresh; a worker thread recomputes it."""
    state = request.app.state
    if not state.metrics_public:
        admin(request.state.caller)  # identified by the gate
    if getattr(state, "metrics", None) is None:
        state.metrics = Cached(lambda: _scrape(sessions(request),
                                                      state.settings.worker_timeout))
    body = state.metrics.fresh()
    if body is None:
        body = await to_thread.run_sync(state.metrics.get)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _scrape(database: sessionmaker[Session], worker_timeout: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(database, worker_timeout))
    return generate_latest(registry)


class JobCollector:
    def __init__(self, database: sessionmaker[Session], worker_timeout: float) -> None:
        self.database = database
        self.worker_timeout = worker_timeout

    def collect(self) -> Iterator[Metric]:
        with self.database() as session:
            by_status = {status: count for status, count in session.execute(
                select(Job.status, func.count()).group_by(Job.status))}
            completed, failed, tokens, cached = session.execute(select(
                func.coalesce(func.sum(Job.completed_count), 0),
                func.coalesce(func.sum(Job.failed_count), 0),
                func.coalesce(func.sum(Job.completion_tokens), 0),
                func.coalesce(func.sum(Job.cached_tokens), 0))).one()
            since = time.time() - RATE_WINDOW_S
            rates = session.execute(
                select(Job.model, func.sum(Chunk.completion_tokens))
                .select_from(Chunk).join(Job, Job.id == Chunk.job_id)
                .where(Chunk.finished_at >= since).group_by(Job.model)).all()
            queued = session.execute(
                select(Job.queue, func.count()).select_from(Chunk)
                .join(Job, Job.id == Chunk.job_id)
                .where(Chunk.status == ChunkStatus.QUEUED).group_by(Job.queue)).all()
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
        yield CounterMetricFamily("dinfer_batch_cached_tokens",
                                  "Prompt tokens the workers' prefix caches gave back, all "
                                  "jobs (their usage's cached_tokens)", value=int(cached))
        speed = GaugeMetricFamily("dinfer_batch_tokens_per_second",
                                  f"Tokens generated per second over the last "
                                  f"{RATE_WINDOW_S:.0f} s, per model", labels=["model"])
        per_model: dict[str, float] = {}
        for model, generated in rates:  # a path outside the model directory: its name
            name = PurePath(model).name
            per_model[name] = per_model.get(name, 0) + int(generated or 0) / RATE_WINDOW_S
        for name, rate in per_model.items():
            speed.add_metric([name], rate)
        yield speed
        chunks = GaugeMetricFamily("dinfer_batch_queued_chunks", "Chunks waiting, per queue",
                                   labels=["queue"])
        for queue, count in queued:
            chunks.add_metric([queue], count)
        yield chunks
        yield GaugeMetricFamily("dinfer_batch_live_workers",
                                "Workers whose heartbeat is live (as `dinfer-batch workers`)",
                                value=live_count(self.database, self.worker_timeout))
        yield self._prefix_reuse()

    def _prefix_reuse(self) -> Metric:
        """Per live worker (by name: a restarted replica keeps it, and its count starts
        again from 0, a counter's reset), the prompt tokens its prefix cache gave back."""
        reused = CounterMetricFamily(
            "dinfer_batch_worker_prefix_tokens_reused",
            "Prompt tokens a live worker's prefix cache gave back since it started "
            "(block-causal models; docs/adr/028-prefix-cache.md)", labels=["worker"])
        newest = {}
        for worker in sorted(live_workers(self.database, self.worker_timeout),
                             key=lambda w: w.started_at):
            newest[worker.name] = worker.prefix_tokens_reused
        for name, count in sorted(newest.items()):
            reused.add_metric([name], count)
        return reused
