"""Shared fixtures: one tiny LLaDA-layout checkpoint per test session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import Engine
from tests.tiny_model import write_tiny_checkpoint

# Tiny models run many small forwards: intra-op threads only add synchronisation cost, and
# on a busy machine they make the suite many times slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("checkpoints") / "tiny")


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint: Path) -> Engine:
    return Engine.from_pretrained(tiny_checkpoint)

