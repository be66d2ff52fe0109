"""The FastAPI app: OpenAI's Files and Batches under /v1, operations endpoints, errors in
OpenAI's shape. `dinfer-batch api` serves it with uvicorn (`create_app` is the factory)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from dinfer_batch.api import batches, errors, files, ops
from dinfer_batch.config import api_auth, max_file_bytes
from dinfer_batch.dashboard.routes import install as install_dashboard

MULTIPART_OVERHEAD = 64 * 1024  # boundaries and headers around the file's bytes
log = logging.getLogger("uvicorn.error")  # configured by uvicorn in every server process


def create_app() -> FastAPI:
    app = FastAPI(title="dinfer-batch", version="0.1.0",
                  description="OpenAI-compatible Files and Batches API for batch generation "
                              "with diffusion language models.")
    app.state.auth = api_auth()
    app.state.sessions = None
    if not app.state.auth:
        log.warning("DINFER_BATCH_API_AUTH=off: no API key is checked and every caller is "
                    "the owner 'local'; use this for local experiments only")
    errors.install(app)
    limit = max_file_bytes()

    @app.middleware("http")
    async def refuse_large_uploads(request: Request,
                                   call_next: Callable[[Request], Awaitable[Response]]
                                   ) -> Response:
        """413 before reading a body whose declared length is already over the limit."""
        declared = request.headers.get("content-length", "")
        if (request.method == "POST" and request.url.path == "/v1/files"
                and declared.isdigit() and int(declared) > limit + MULTIPART_OVERHEAD):
            return errors.error_response(413, f"the file is larger than the limit of {limit} "
                                              "bytes (DINFER_BATCH_MAX_FILE_BYTES)", "file",
                                         "file_too_large")
        return await call_next(request)

    for module in (files, batches, ops):
        app.include_router(module.router)
    install_dashboard(app)
    return app
