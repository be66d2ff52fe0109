"""Service settings, read from the environment each time they are asked for."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_dir

from dinfer_batch.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHUNK_SIZE = 256
DEFAULT_QUEUE = "dinfer_batch"


def database_url() -> str:
    """`DINFER_BATCH_DATABASE_URL`, else a SQLite file under the user's data directory."""
    url = os.environ.get("DINFER_BATCH_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{Path(user_data_dir('dinfer-batch')) / 'dinfer-batch.db'}"


def default_model() -> str:
    """`DINFER_BATCH_MODEL`, else the bundled demo model."""
    return os.environ.get("DINFER_BATCH_MODEL") or str(REPO_ROOT / "models" / "demo")


def default_queue() -> str:
    return os.environ.get("DINFER_BATCH_QUEUE") or DEFAULT_QUEUE


def engine_batch_items() -> int:
    """How many items one `Engine.generate` call gets; cancellation is checked between calls."""
    value = os.environ.get("DINFER_BATCH_ENGINE_BATCH") or str(DEFAULT_CHUNK_SIZE)
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"DINFER_BATCH_ENGINE_BATCH={value!r} must be a positive integer")
    return int(value)


def chunk_timeout() -> float | None:
    """`DINFER_BATCH_CHUNK_TIMEOUT`: the longest one engine call (at most a chunk's items) may
    run before the worker counts it as hung and is recycled; default 1800 s, 0 turns it off."""
    value = os.environ.get("DINFER_BATCH_CHUNK_TIMEOUT") or "1800"
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise UserError(f"DINFER_BATCH_CHUNK_TIMEOUT={value!r} must be a number of seconds >= 0")
    return seconds or None
