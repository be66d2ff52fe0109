"""The settings object: every variable read in one pass, each bad value a usage error
naming it, read by each process's entry and handed down (docs/adr/051)."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from dinfer_batch.cli import main
from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError

BAD = {  # variable -> (a bad value, the start of its error)
    "DINFER_BATCH_KERNELS": ("cuda", "DINFER_BATCH_KERNELS='cuda': expected one of"),
    "DINFER_BATCH_ENGINE_BATCH": ("0", "DINFER_BATCH_ENGINE_BATCH='0' must be a positive"),
    "DINFER_BATCH_PREFIX_CACHE_MB": ("-1", "DINFER_BATCH_PREFIX_CACHE_MB='-1' must be an"),
    "DINFER_BATCH_DB_RETRY_SECONDS": ("soon", "DINFER_BATCH_DB_RETRY_SECONDS='soon' must be"),
    "DINFER_BATCH_MAX_ENQUEUED_TOKENS": ("1e3", "DINFER_BATCH_MAX_ENQUEUED_TOKENS='1e3' must"),
    "DINFER_BATCH_LOCAL_MAX_ENQUEUED_REQUESTS": ("x", "DINFER_BATCH_LOCAL_MAX_ENQUEUED_"),
    "DINFER_BATCH_MAX_CHUNK_SIZE": ("0", "DINFER_BATCH_MAX_CHUNK_SIZE='0' must be a positive"),
    "DINFER_BATCH_CHUNK_TIMEOUT": ("-5", "DINFER_BATCH_CHUNK_TIMEOUT='-5' must be a number"),
    "DINFER_BATCH_CONSTRAINT_CACHE_MB": ("0", "DINFER_BATCH_CONSTRAINT_CACHE_MB='0' must be a"),
    "DINFER_BATCH_HEARTBEAT": ("often", "DINFER_BATCH_HEARTBEAT='often' must be a positive"),
    "DINFER_BATCH_MAX_FILE_BYTES": ("1MB", "DINFER_BATCH_MAX_FILE_BYTES='1MB' must be"),
    "DINFER_BATCH_RETENTION_DAYS": ("-1", "DINFER_BATCH_RETENTION_DAYS='-1' must be a number"),
    "DINFER_BATCH_VISIBILITY_TIMEOUT": ("1h", "DINFER_BATCH_VISIBILITY_TIMEOUT='1h' must be a"),
}


def test_defaults_are_the_documented_ones() -> None:
    settings = Settings.from_env({})
    assert (settings.kernels, settings.engine_batch_items, settings.prefix_cache_bytes,
            settings.db_retry_seconds, settings.chunk_timeout, settings.chunk_deadline,
            settings.worker_timeout, settings.heartbeat_seconds, settings.max_file_bytes,
            settings.retention_days, settings.api_auth, settings.default_queue) == (
        "auto", 256, 1024 * 2**20, 300.0, 1800.0, 1200.0, 60.0, 5.0, 200_000_000, None, True,
        "dinfer_batch")
    assert settings.api_models == (settings.default_model,)
    assert (settings.broker_url, settings.visibility_timeout) == ("redis://localhost:6379/0",
                                                                  3600)
    assert Settings.from_env({"DINFER_BATCH_CHUNK_TIMEOUT": "0"}).chunk_timeout is None


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_names_its_variable_and_value(name: str) -> None:
    value, message = BAD[name]
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(")):
        Settings.from_env({name: value})


def test_the_command_line_reads_them_once_as_it_starts_and_hands_them_down() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings.from_env({}).worker_timeout = 1.0  # type: ignore[misc]
    refused = CliRunner().invoke(main, ["list"], env={"DINFER_BATCH_WORKER_TIMEOUT": "never"})
    assert refused.exit_code == 2  # before the command, which would need the database
    assert "DINFER_BATCH_WORKER_TIMEOUT='never'" in refused.output
    shown = CliRunner().invoke(main, ["model", "--json"], env={"DINFER_BATCH_MODEL": "nope"})
    assert "unknown model 'nope'" in shown.output  # the group's settings, in the command
