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
RUN mkdir -p dinfer_batch engine kernels workers training \
    && pip install -e . && pip uninstall -y dinfer-batch
COPY . .
# editable: the migrations/ and models/ folders stay beside the code
RUN pip install --no-deps -e .

ENTRYPOINT ["dinfer-batch"]
CMD ["--help"]
