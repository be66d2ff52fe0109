"""Every `DINFER_BATCH_*` setting, read from an environment in one pass into one frozen
`Settings` (`Settings.from_env`, the one parser). Each process's entry reads it as it
starts, so a bad value is a usage error then, not mid-job: the CLI group (handed to every
command as its click context's object), the API's `create_app` (`app.state.settings`).
Everything below is handed the object, or the plain values it needs, and never reads the
environment (docs/adr/051-settings-handed-down.md); the engine's options are made from it
in jobs/running/engine_options.py, the broker the entry connects to from `broker_url` and
`visibility_timeout` (dinfer_workers/broker.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_data_dir

from dinfer_batch.errors import UserError
from dinfer_engine.choices import FAMILIES, KERNELS
from dinfer_models import DEMO, MODELS_DIR

CODE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding the installed packages
DEFAULT_CHUNK_SIZE = 256
DEFAULT_QUEUE = "dinfer_batch"
DEFAULT_BROKER_URL = "redis://localhost:6379/0"
FAMILY_NAMES = [family.name for family in FAMILIES.values()]  # as users know them
MODEL_HELP = (f"A checkpoint directory ({', '.join(FAMILY_NAMES[:-1])} or {FAMILY_NAMES[-1]} in "
              "the Hugging Face layout; `dinfer-batch model` shows its family), "
              "or a model name under DINFER_BATCH_MODEL_DIR (default: the installed "
              "dinfer_models/ folder, so the bundled model is demo). "
              "Default: DINFER_BATCH_MODEL, else demo.")


@dataclass(frozen=True)
class DbPool:
    """The most server connections one process holds: `size` kept open, `overflow` more
    opened under load and closed after; a thread that finds all of them in use waits up
    to `timeout` seconds for one (docs/adr/056-connection-budget-and-pgbouncer.md)."""

    size: int = 2
    overflow: int = 0
    timeout: float = 30.0

    @property
    def most(self) -> int:
        return self.size + self.overflow


@dataclass(frozen=True)
class Settings:
    """One field per setting; its comment names the variable (`DINFER_BATCH_` left out),
    the default and what acts on it."""

    database_url: str  # DATABASE_URL, else a SQLite file under the user's data directory
    default_model: str  # MODEL, else the bundled demo model
    model_dir: Path
    """MODEL_DIR: where model names (relative `--model` values) are found, the same on
    every node; by default the bundled `dinfer_models/` folder, so the demo model is `demo` on
    every machine."""
    default_queue: str  # QUEUE, else dinfer_batch
    broker_url: str
    """BROKER_URL (default redis://localhost:6379/0): the Redis that carries the permits,
    which each entry that publishes or takes them makes its `Broker` on."""
    visibility_timeout: int
    """VISIBILITY_TIMEOUT (default 3600 s): after how long Redis re-delivers a permit a
    worker took and never acknowledged; far longer than a chunk takes (docs/adr/002)."""
    kernels: str
    """KERNELS (auto, torch or triton; default auto): which implementation a worker's
    engine runs (dinfer_kernels/backend.py, docs/kernels.md)."""
    engine_factory: str | None
    """ENGINE=module:factory: an object with the engine's `generate` and `tokenizer` in
    its place (dinfer_workers/engine_cache.py), for benchmarks and tests."""
    engine_batch_items: int
    """ENGINE_BATCH (default 256): how many items one `Engine.generate` call gets;
    cancellation is checked between calls."""
    prefix_cache_bytes: int
    """PREFIX_CACHE_MB (default 1024; 0: off): the memory each worker's engine may keep
    whole prompt blocks' keys/values in, for block-causal models (LLaDA2, LLaDA2.1) to
    reuse shared prompt prefixes across rows, chunks and jobs; counted for the whole
    model, each tensor-parallel rank holding its share (docs/engine.md)."""
    db_pool: DbPool
    """DB_POOL_SIZE (default 2) and DB_MAX_OVERFLOW (default 0): the connection budget of
    one process (a worker, the API's server process, a CLI command): at most their sum of
    connections to the database, shared by its threads (a worker's chunk, result writer,
    heartbeat and reaper); a thread waits for one that is in use rather than open more.
    Behind PgBouncer in transaction pooling (docs/fleet.md) each is a client connection
    that holds a server connection only while a transaction runs."""
    db_retry_seconds: float
    """DB_RETRY_SECONDS: how long a worker's database calls wait out an outage before
    giving up (default 300 s, 0: not at all; dinfer_batch/storage/retry.py)."""
    max_enqueued_requests: int | None
    max_enqueued_tokens: int | None
    local_max_enqueued_requests: int | None
    local_max_enqueued_tokens: int | None
    """[LOCAL_]MAX_ENQUEUED_{REQUESTS,TOKENS}: an owner's quota when its keys set none
    (dinfer_batch/jobs/intake/quota.py); unset: no limit."""
    max_chunk_size: int | None
    max_request_tokens: int | None
    max_batch_requests: int | None
    """MAX_{CHUNK_SIZE,REQUEST_TOKENS,BATCH_REQUESTS}: what an owner whose keys set none
    may ask for (dinfer_batch/jobs/intake/entitlements.py); unset: the service's own."""
    chunk_timeout: float | None
    """CHUNK_TIMEOUT: the longest one engine call (at most a chunk's items) may run before
    the worker counts it as hung and is recycled; default 1800 s, 0 (None) turns it off."""
    chunk_deadline: float | None
    """CHUNK_DEADLINE: the most seconds of engine work (compiles, calls and their retries
    in halves) one chunk may take; once passed, its remaining requests fail with
    `deadline_exceeded` and the worker goes on to the next chunk. Default 1200 s, inside
    the chunk timeout and the broker's visibility timeout (3600 s); 0 (None) turns it off."""
    constraint_cache_mb: int
    """CONSTRAINT_CACHE_MB: the estimated memory a worker's compiled constraints may hold
    (default 1024 MB); the least recently used are evicted first, and one whose grammar
    alone is larger fails its requests."""
    constraint_memory_mb: int | None
    """CONSTRAINT_MEMORY_MB: the megabytes of documented constrained-row memory a worker's
    engine admits at once (the engine's `constraint_memory_mb`, ADR 047); unset: the
    checkpoint's generation_config.json or the engine's default (4096). A worker's
    operator knows its memory, so this one wins over the checkpoint's."""
    worker_timeout: float
    """WORKER_TIMEOUT: a worker whose last heartbeat is older is dead, and the reaper
    re-queues its chunks (default 60 s)."""
    heartbeat_seconds: float
    """HEARTBEAT: how often a worker looks at its state, writing its heartbeat when it
    changed (an unchanged one a third of the worker timeout apart); the reaper's passes
    come every two of these, once per fleet (default 5 s; keep it well under the worker
    timeout: docs/adr/057-fleet-work-once.md)."""
    min_every: float
    """MIN_EVERY: the shortest `schedule add --every` interval, in seconds (default 10;
    lower it for tests and demos only)."""
    files_dir: Path
    """FILES_DIR: where `POST /v1/files` stores uploads; default a folder in the user's
    data directory."""
    max_file_bytes: int  # MAX_FILE_BYTES, default 200 MB: larger uploads get 413
    api_auth: bool  # False only when API_AUTH=off (every caller is the owner `local`)
    api_allowed_hosts: frozenset[str]
    """ALLOWED_HOSTS (comma-separated host names or addresses, `*` for any): the `Host` a
    request must name while DINFER_BATCH_API_AUTH=off, so that a web page whose name was
    rebound to this machine (DNS rebinding) cannot use the API or the dashboard. Default:
    localhost, 127.0.0.1, ::1 and the address `dinfer-batch api --host` listens on
    (DINFER_BATCH_API_BIND, which it sets)."""
    metrics_public: bool
    """METRICS_PUBLIC=1: /metrics answers without a key (a scraper on a private network);
    by default it needs an admin key."""
    api_models: tuple[str, ...]
    """API_MODELS (comma-separated paths), else just the default model: the models a batch
    may name (`model` in the body, by path or directory name). A client never reaches any
    other directory of the server."""
    webhook_timeout: float
    """WEBHOOK_TIMEOUT: how long one webhook POST may take before it counts as failed and
    is retried (default 10 s)."""
    webhook_retry_seconds: float
    """WEBHOOK_RETRY_SECONDS: the wait before a failed webhook delivery's first retry
    (default 5 s); each later wait is four times longer, up to 2 h."""
    retention_days: float | None
    """RETENTION_DAYS: ended jobs older than this many days lose their requests and
    results (the job row and its counts stay); unset or 0 (None): kept for ever."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Every setting from `environ`; UserError naming the first bad variable and value."""
        read = _Reader(environ)
        default_model = read.text("DINFER_BATCH_MODEL") or str(DEMO)
        data_dir = Path(user_data_dir("dinfer-batch"))
        model_dir = read.text("DINFER_BATCH_MODEL_DIR")
        files_dir = read.text("DINFER_BATCH_FILES_DIR")
        return cls(
            database_url=read.text("DINFER_BATCH_DATABASE_URL")
            or f"sqlite:///{data_dir / 'dinfer-batch.db'}",
            default_model=default_model,
            model_dir=Path(model_dir).expanduser() if model_dir else MODELS_DIR,
            default_queue=read.text("DINFER_BATCH_QUEUE") or DEFAULT_QUEUE,
            broker_url=read.text("DINFER_BATCH_BROKER_URL") or DEFAULT_BROKER_URL,
            visibility_timeout=read.positive_int("DINFER_BATCH_VISIBILITY_TIMEOUT", 3600),
            kernels=read.kernels(),
            engine_factory=read.text("DINFER_BATCH_ENGINE") or None,
            engine_batch_items=read.positive_int("DINFER_BATCH_ENGINE_BATCH",
                                                 DEFAULT_CHUNK_SIZE),
            prefix_cache_bytes=read.prefix_cache_mb() * 2**20,
            db_pool=DbPool(read.positive_int("DINFER_BATCH_DB_POOL_SIZE", DbPool.size),
                           read.count("DINFER_BATCH_DB_MAX_OVERFLOW", DbPool.overflow)),
            db_retry_seconds=read.seconds("DINFER_BATCH_DB_RETRY_SECONDS", 300,
                                          zero_is_off=True),
            max_enqueued_requests=read.enqueued_limit("DINFER_BATCH_MAX_ENQUEUED_REQUESTS"),
            max_enqueued_tokens=read.enqueued_limit("DINFER_BATCH_MAX_ENQUEUED_TOKENS"),
            local_max_enqueued_requests=read.enqueued_limit(
                "DINFER_BATCH_LOCAL_MAX_ENQUEUED_REQUESTS"),
            local_max_enqueued_tokens=read.enqueued_limit(
                "DINFER_BATCH_LOCAL_MAX_ENQUEUED_TOKENS"),
            max_chunk_size=read.entitlement_limit("DINFER_BATCH_MAX_CHUNK_SIZE"),
            max_request_tokens=read.entitlement_limit("DINFER_BATCH_MAX_REQUEST_TOKENS"),
            max_batch_requests=read.entitlement_limit("DINFER_BATCH_MAX_BATCH_REQUESTS"),
            chunk_timeout=read.seconds("DINFER_BATCH_CHUNK_TIMEOUT", 1800,
                                       zero_is_off=True) or None,
            chunk_deadline=read.seconds("DINFER_BATCH_CHUNK_DEADLINE", 1200,
                                        zero_is_off=True) or None,
            constraint_cache_mb=read.positive_int("DINFER_BATCH_CONSTRAINT_CACHE_MB", 1024),
            constraint_memory_mb=read.optional_positive_int("DINFER_BATCH_CONSTRAINT_MEMORY_MB"),
            worker_timeout=read.seconds("DINFER_BATCH_WORKER_TIMEOUT", 60),
            heartbeat_seconds=read.seconds("DINFER_BATCH_HEARTBEAT", 5),
            min_every=read.seconds("DINFER_BATCH_MIN_EVERY", 10),
            files_dir=Path(files_dir) if files_dir else data_dir / "files",
            max_file_bytes=read.positive_int("DINFER_BATCH_MAX_FILE_BYTES",
                                             200 * 1000 * 1000),
            api_auth=environ.get("DINFER_BATCH_API_AUTH", "on").lower() != "off",
            api_allowed_hosts=read.allowed_hosts(),
            metrics_public=environ.get("DINFER_BATCH_METRICS_PUBLIC", "") == "1",
            api_models=tuple(m for m in read.text("DINFER_BATCH_API_MODELS").split(",") if m)
            or (default_model,),
            webhook_timeout=read.seconds("DINFER_BATCH_WEBHOOK_TIMEOUT", 10),
            webhook_retry_seconds=read.seconds("DINFER_BATCH_WEBHOOK_RETRY_SECONDS", 5),
            retention_days=read.retention_days())

    def server_dirs(self) -> list[Path]:
        """The directories whose paths a client never sees (redact.for_clients): uploads,
        models (and the offered models' folders), the installed code, the data directory, the
        temporary directory and the home directory."""
        return [self.files_dir, self.model_dir, CODE_ROOT, Path(tempfile.gettempdir()),
                Path(user_data_dir("dinfer-batch")), Path.home(),
                *(Path(model).parent for model in self.api_models)]



class _Reader:
    """Reads a variable from an environment, with the usage error of each kind of value."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def text(self, name: str) -> str:
        return self.environ.get(name, "")

    def kernels(self) -> str:
        choice = self.environ.get("DINFER_BATCH_KERNELS", "auto").strip().lower() or "auto"
        if choice not in KERNELS:
            raise UserError(f"DINFER_BATCH_KERNELS={choice!r}: expected one of "
                            f"{', '.join(KERNELS)}")
        return choice

    def positive_int(self, name: str, default: int) -> int:
        value = self.text(name) or str(default)
        if not value.isdigit() or int(value) < 1:
            raise UserError(f"{name}={value!r} must be a positive integer")
        return int(value)

    def count(self, name: str, default: int) -> int:
        value = self.text(name) or str(default)
        if not value.isdigit():
            raise UserError(f"{name}={value!r} must be a whole number >= 0")
        return int(value)

    def optional_positive_int(self, name: str) -> int | None:
        return self.positive_int(name, 1) if self.text(name) else None

    def prefix_cache_mb(self) -> int:
        value = self.text("DINFER_BATCH_PREFIX_CACHE_MB") or "1024"
        if not value.isdigit():
            raise UserError(f"DINFER_BATCH_PREFIX_CACHE_MB={value!r} must be an integer >= 0 "
                            "(megabytes; 0 turns the prefix cache off)")
        return int(value)

    def enqueued_limit(self, name: str) -> int | None:
        return self.count(name, 0) if self.text(name) else None

    def entitlement_limit(self, name: str) -> int | None:
        value = self.text(name)
        if not value:
            return None
        if not value.isdigit() or int(value) < 1:
            raise UserError(f"{name}={value!r} must be a positive whole number")
        return int(value)

    def seconds(self, name: str, default: float, zero_is_off: bool = False) -> float:
        value = self.text(name) or str(default)
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if seconds < 0 or (seconds == 0 and not zero_is_off):
            expected = "a number of seconds >= 0 (0: off)" if zero_is_off else \
                "a positive number of seconds"
            raise UserError(f"{name}={value!r} must be {expected}")
        return seconds

    def retention_days(self) -> float | None:
        value = self.text("DINFER_BATCH_RETENTION_DAYS") or "0"
        try:
            days = float(value)
        except ValueError:
            days = -1.0
        if not days >= 0:
            raise UserError(f"DINFER_BATCH_RETENTION_DAYS={value!r} must be a number of days "
                            ">= 0 (0: off)")
        return days or None

    def allowed_hosts(self) -> frozenset[str]:
        listed = self.text("DINFER_BATCH_ALLOWED_HOSTS")
        hosts = [h for h in listed.split(",") if h.strip()] or [
            "localhost", "127.0.0.1", "::1", self.text("DINFER_BATCH_API_BIND")]
        return frozenset(host.strip().strip("[]").lower() for host in hosts if host.strip())
