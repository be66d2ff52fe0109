# dinfer-batch: one image for every service (migrate, beat, api, worker, the CLI).
# PyPI's torch wheels bundle CUDA; GPUs come from the NVIDIA container toolkit
# (docker-compose.yml reserves them for the worker).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# dependencies first, so that code changes reuse this layer
COPY pyproject.toml README.md ./
RUN mkdir -p dinfer_batch dinfer_engine dinfer_kernels dinfer_workers dinfer_training \
        dinfer_migrations dinfer_models \
    && pip install . && pip uninstall -y dinfer-batch
COPY . .
# not editable: the wheel carries the migrations and the demo model (ADR 039)
RUN pip install --no-deps . && rm -rf /app/build

ENTRYPOINT ["dinfer-batch"]
CMD ["--help"]
