"""Every `DINFER_BATCH_*` setting, each read from the environment when it is asked for;
a process's entry reads those of the layers below and hands them down as plain values
(the engine's options: `engine_options`); the broker's, which the Celery app needs when
it is imported, come from workers/settings.py (docs/adr/031-one-settings-object.md)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from platformdirs import user_data_dir

from dinfer_batch.errors import UserError
from engine.choices import KERNELS
from workers.settings import broker_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHUNK_SIZE = 256
DEFAULT_QUEUE = "dinfer_batch"
MODEL_HELP = ("A checkpoint directory (LLaDA, LLaDA-MoE, LLaDA2 or LLaDA2.1 in the Hugging Face "
              "layout; `dinfer-batch model` shows its family), "
              "or a model name under DINFER_BATCH_MODEL_DIR (default: the repository's "
              "models/, so the bundled model is demo). Default: DINFER_BATCH_MODEL, else demo.")


def database_url() -> str:
    """`DINFER_BATCH_DATABASE_URL`, else a SQLite file under the user's data directory."""
    url = os.environ.get("DINFER_BATCH_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{Path(user_data_dir('dinfer-batch')) / 'dinfer-batch.db'}"


def default_model() -> str:
    """`DINFER_BATCH_MODEL`, else the bundled demo model."""
    return os.environ.get("DINFER_BATCH_MODEL") or str(REPO_ROOT / "models" / "demo")


def broker_url() -> str:
    """`DINFER_BATCH_BROKER_URL` (default redis://localhost:6379/0), as this process's
    Celery app connects to it."""
    return broker_settings().url


def kernels() -> str:
    """`DINFER_BATCH_KERNELS` (auto, torch or triton; default auto): which implementation
    a worker's engine runs (kernels/backend.py, docs/kernels.md)."""
    choice = os.environ.get("DINFER_BATCH_KERNELS", "auto").strip().lower() or "auto"
    if choice not in KERNELS:
        raise UserError(f"DINFER_BATCH_KERNELS={choice!r}: expected one of "
                        f"{', '.join(KERNELS)}")
    return choice


def engine_factory() -> str | None:
    """`DINFER_BATCH_ENGINE=module:factory`: an object with the engine's `generate` and
    `tokenizer` in its place (workers/engine_cache.py), for benchmarks and tests."""
    return os.environ.get("DINFER_BATCH_ENGINE") or None


def db_retry_seconds() -> float:
    """`DINFER_BATCH_DB_RETRY_SECONDS`: how long a worker's database calls wait out an
    outage before giving up (default 300 s; dinfer_batch/storage/retry.py)."""
    return float(os.environ.get("DINFER_BATCH_DB_RETRY_SECONDS", "300"))


def enqueued_limit(name: str) -> int | None:
    """`DINFER_BATCH_[LOCAL_]MAX_ENQUEUED_{REQUESTS,TOKENS}` (`name`): an owner's quota
    when its keys set none (dinfer_batch/jobs/quota.py); unset: no limit."""
    value = os.environ.get(name)
    if not value:
        return None
    if not value.isdigit():
        raise UserError(f"{name}={value!r} must be a whole number >= 0")
    return int(value)


def entitlement_limit(name: str) -> int | None:
    """`DINFER_BATCH_MAX_{CHUNK_SIZE,REQUEST_TOKENS,BATCH_REQUESTS}` (`name`): what an
    owner whose keys set none may ask for (dinfer_batch/jobs/entitlements.py); unset: the
    service's own."""
    value = os.environ.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{name}={value!r} must be a positive whole number")
    return int(value)


def default_queue() -> str:
    return os.environ.get("DINFER_BATCH_QUEUE") or DEFAULT_QUEUE


def engine_batch_items() -> int:
    """How many items one `Engine.generate` call gets; cancellation is checked between calls."""
    value = os.environ.get("DINFER_BATCH_ENGINE_BATCH") or str(DEFAULT_CHUNK_SIZE)
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"DINFER_BATCH_ENGINE_BATCH={value!r} must be a positive integer")
    return int(value)


def prefix_cache_bytes() -> int:
    """`DINFER_BATCH_PREFIX_CACHE_MB` (default 1024; 0: off): the memory each worker's
    engine may keep whole prompt blocks' keys/values in, for block-causal models (LLaDA2,
    LLaDA2.1) to reuse shared prompt prefixes across rows, chunks and jobs; counted for
    the whole model, each tensor-parallel rank holding its share (docs/engine.md)."""
    value = os.environ.get("DINFER_BATCH_PREFIX_CACHE_MB") or "1024"
    if not value.isdigit():
        raise UserError(f"DINFER_BATCH_PREFIX_CACHE_MB={value!r} must be an integer >= 0 "
                        "(megabytes; 0 turns the prefix cache off)")
    return int(value) * 2**20


def chunk_timeout() -> float | None:
    """`DINFER_BATCH_CHUNK_TIMEOUT`: the longest one engine call (at most a chunk's items) may
    run before the worker counts it as hung and is recycled; default 1800 s, 0 turns it off."""
    return _seconds("DINFER_BATCH_CHUNK_TIMEOUT", 1800, zero_is_off=True) or None


def chunk_deadline() -> float | None:
    """`DINFER_BATCH_CHUNK_DEADLINE`: the most seconds of engine work (compiles, calls and
    their retries in halves) one chunk may take; once passed, its remaining requests fail
    with `deadline_exceeded` and the worker goes on to the next chunk. Default 1200 s,
    inside the chunk timeout and the broker's visibility timeout (3600 s); 0 turns it
    off."""
    return _seconds("DINFER_BATCH_CHUNK_DEADLINE", 1200, zero_is_off=True) or None


def constraint_cache_mb() -> int:
    """`DINFER_BATCH_CONSTRAINT_CACHE_MB`: the estimated memory a worker's compiled
    constraints may hold (default 1024 MB); the least recently used are evicted first, and
    one whose grammar alone is larger fails its requests."""
    return _positive_int("DINFER_BATCH_CONSTRAINT_CACHE_MB", 1024)


def _positive_int(name: str, default: int) -> int:
    value = os.environ.get(name) or str(default)
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _positive_seconds(name: str, default: float) -> float:
    return _seconds(name, default)


def _seconds(name: str, default: float, zero_is_off: bool = False) -> float:
    value = os.environ.get(name) or str(default)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0 or (seconds == 0 and not zero_is_off):
        expected = "a number of seconds >= 0 (0: off)" if zero_is_off else \
            "a positive number of seconds"
        raise UserError(f"{name}={value!r} must be {expected}")
    return seconds


def worker_timeout() -> float:
    """`DINFER_BATCH_WORKER_TIMEOUT`: a worker whose last heartbeat is older is dead, and
    the reaper re-queues its chunks (default 60 s)."""
    return _positive_seconds("DINFER_BATCH_WORKER_TIMEOUT", 60)


def heartbeat_seconds() -> float:
    """`DINFER_BATCH_HEARTBEAT`: how often a worker writes its heartbeat and runs the reaper
    (default 5 s; keep it well under the worker timeout)."""
    return _positive_seconds("DINFER_BATCH_HEARTBEAT", 5)


def model_dir() -> Path:
    """`DINFER_BATCH_MODEL_DIR`: where model names (relative `--model` values) are found,
    the same on every node; by default the bundled `models/` folder, so the demo model is
    `demo` on every machine."""
    value = os.environ.get("DINFER_BATCH_MODEL_DIR")
    return Path(value).expanduser() if value else REPO_ROOT / "models"


def min_every() -> float:
    """`DINFER_BATCH_MIN_EVERY`: the shortest `schedule add --every` interval, in seconds
    (default 10; lower it for tests and demos only)."""
    return _positive_seconds("DINFER_BATCH_MIN_EVERY", 10)


def files_dir() -> Path:
    """Where `POST /v1/files` stores uploads: `DINFER_BATCH_FILES_DIR`, else a folder in
    the user's data directory."""
    value = os.environ.get("DINFER_BATCH_FILES_DIR")
    return Path(value) if value else Path(user_data_dir("dinfer-batch")) / "files"


def max_file_bytes() -> int:
    """`DINFER_BATCH_MAX_FILE_BYTES`, default 200 MB: larger uploads get 413."""
    value = os.environ.get("DINFER_BATCH_MAX_FILE_BYTES") or str(200 * 1000 * 1000)
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"DINFER_BATCH_MAX_FILE_BYTES={value!r} must be a positive integer")
    return int(value)


def api_auth() -> bool:
    """False only when `DINFER_BATCH_API_AUTH=off` (local experiments: every caller is the
    owner `local`)."""
    return os.environ.get("DINFER_BATCH_API_AUTH", "on").lower() != "off"


def server_dirs() -> list[Path]:
    """The directories whose paths a client never sees (redact.for_clients): uploads,
    models (and the offered models' folders), this repository, the data directory, the
    temporary directory and the home directory."""
    return [files_dir(), model_dir(), REPO_ROOT, Path(tempfile.gettempdir()),
            Path(user_data_dir("dinfer-batch")), Path.home(),
            *(Path(model).parent for model in api_models())]


def api_allowed_hosts() -> set[str]:
    """`DINFER_BATCH_ALLOWED_HOSTS` (comma-separated host names or addresses, `*` for
    any): the `Host` a request must name while DINFER_BATCH_API_AUTH=off, so that a web
    page whose name was rebound to this machine (DNS rebinding) cannot use the API or
    the dashboard. Default: localhost, 127.0.0.1, ::1 and the address `dinfer-batch api
    --host` listens on (DINFER_BATCH_API_BIND, which it sets)."""
    listed = os.environ.get("DINFER_BATCH_ALLOWED_HOSTS", "")
    hosts = [h for h in listed.split(",") if h.strip()] or [
        "localhost", "127.0.0.1", "::1", os.environ.get("DINFER_BATCH_API_BIND", "")]
    return {host.strip().strip("[]").lower() for host in hosts if host.strip()}


def metrics_public() -> bool:
    """`DINFER_BATCH_METRICS_PUBLIC=1`: /metrics answers without a key (a scraper on a
    private network); by default it needs an admin key."""
    return os.environ.get("DINFER_BATCH_METRICS_PUBLIC", "") == "1"


def api_models() -> list[str]:
    """Models a batch may name (`model` in the body, by path or directory name):
    `DINFER_BATCH_API_MODELS` (comma-separated paths), else just the default model. A
    client never reaches any other directory of the server."""
    listed = os.environ.get("DINFER_BATCH_API_MODELS", "")
    return [m for m in listed.split(",") if m] or [default_model()]


def webhook_timeout() -> float:
    """`DINFER_BATCH_WEBHOOK_TIMEOUT`: how long one webhook POST may take before it counts
    as failed and is retried (default 10 s)."""
    return _positive_seconds("DINFER_BATCH_WEBHOOK_TIMEOUT", 10)


def webhook_retry_seconds() -> float:
    """`DINFER_BATCH_WEBHOOK_RETRY_SECONDS`: the wait before a failed webhook delivery's
    first retry (default 5 s); each later wait is four times longer, up to 2 h."""
    return _positive_seconds("DINFER_BATCH_WEBHOOK_RETRY_SECONDS", 5)


def retention_days() -> float | None:
    """`DINFER_BATCH_RETENTION_DAYS`: ended jobs older than this many days lose their
    requests and results (the job row and its counts stay); unset or 0: kept for ever."""
    value = os.environ.get("DINFER_BATCH_RETENTION_DAYS") or "0"
    try:
        days = float(value)
    except ValueError:
        days = -1.0
    if not days >= 0:
        raise UserError(f"DINFER_BATCH_RETENTION_DAYS={value!r} must be a number of days "
                        ">= 0 (0: off)")
    return days or None
