"""The API server process's composition root: one FastAPI app of OpenAI's Files and
Batches under /v1 (`dinfer_batch/api/`), the operations endpoints and the web dashboard
(`dinfer_batch/dashboard/`), errors in OpenAI's shape. It sits above both, so neither
imports the other's installer. `dinfer-batch api` serves it with uvicorn (`create_app` is
the factory). Every request passes the gate (api/gate.py: key, then body limits) first."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from dinfer_batch.api import batches, errors, files, ops
from dinfer_batch.api.gate import Gate
from dinfer_batch.api.probes import Readiness
from dinfer_batch.config import Settings
from dinfer_batch.dashboard.routes import install as install_dashboard
from dinfer_workers.broker import Broker

log = logging.getLogger("uvicorn.error")  # configured by uvicorn in every server process


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Probe readiness in the background and clear what a killed server left in the files
    directory, before the first request; the broker's connections are returned at the
    end."""
    readiness = app.state.readiness
    files.remove_orphans(app.state.settings)
    readiness.start()
    try:
        yield
    finally:
        readiness.stop()
        app.state.broker.close()


def create_app() -> FastAPI:
    """The app, on the settings read now: the entry of each server process (uvicorn calls
    this factory in each), so a bad setting stops the server before its first request.
    Everything below is handed them (`app.state.settings`, api/auth.py's `app_settings`),
    and the broker made from them (`app.state.broker`, `app_broker`)."""
    config = Settings.from_env(os.environ)
    # no /docs or /redoc: FastAPI's pages load their scripts from a CDN, which would run
    # on the dashboard's origin (with its cookie); the schema stays at /openapi.json
    app = FastAPI(title="dinfer-batch", version="0.1.0", lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="OpenAI-compatible Files and Batches API for batch generation "
                              "with diffusion language models.")
    app.state.settings = config
    app.state.auth = config.api_auth
    app.state.allowed_hosts = config.api_allowed_hosts
    app.state.metrics_public = config.metrics_public
    app.state.sessions = None
    app.state.broker = Broker(config.broker_url, config.visibility_timeout)
    app.state.readiness = Readiness(config.database_url, app.state.broker)
    if not app.state.auth:
        log.warning("DINFER_BATCH_API_AUTH=off: no API key is checked and every caller is "
                    "the owner 'local'; use this for local experiments only (answering "
                    "only requests for host %s: DINFER_BATCH_ALLOWED_HOSTS)",
                    ", ".join(sorted(app.state.allowed_hosts)))
    errors.install(app)
    app.add_middleware(Gate, file_limit=config.max_file_bytes,
                       metrics_public=app.state.metrics_public)
    for module in (files, batches, ops):
        app.include_router(module.router)
    install_dashboard(app)
    return app
