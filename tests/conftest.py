"""Shared fixtures: one tiny LLaDA-layout checkpoint per test session, and an environment
that does not depend on the caller's: every `DINFER_BATCH_*` setting (but the tests' own
`DINFER_BATCH_TEST_*`) is cleared before anything imports the service, and again around
every test, so a test sets what it uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


def _callers_settings() -> list[str]:
    return [name for name in os.environ
            if name.startswith("DINFER_BATCH_") and not name.startswith("DINFER_BATCH_TEST_")]


# at once, for the whole session: nothing the tests import or start sees the caller's
for _name in _callers_settings():
    del os.environ[_name]

from dinfer_engine import Engine  # noqa: E402
from tests.tiny_model import write_tiny_checkpoint  # noqa: E402

# Tiny models run many small forwards: intra-op threads only add synchronisation cost, and
# on a busy machine they make the suite many times slower.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def own_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No `DINFER_BATCH_*` setting from outside the test (nor left by another test): the
    environment cleared. A test that sets one in-process builds its settings after
    `monkeypatch.setenv` (service_helpers.env_settings), as a process's entry reads them,
    and hands them down (docs/adr/051-settings-handed-down.md); the command line
    (CliRunner) and the servers the tests start read their own."""
    for name in _callers_settings():
        monkeypatch.delenv(name)
    yield


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("checkpoints") / "tiny")


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint: Path) -> Engine:
    return Engine.from_pretrained(tiny_checkpoint)

