"""Fixtures for the HTTP API tests: a real `dinfer-batch api` server on SQLite, then on
PostgreSQL (`api`), or on SQLite only (`sqlite_api`); tests/api/conftest.py offers them
beside the service's fixtures, which they build on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_helpers import Api, start_api, stop_api
from tests.service_helpers import Service


@pytest.fixture
def api(service: Service, tmp_path: Path) -> Iterator[Api]:
    """A server on SQLite, then on PostgreSQL."""
    server = start_api(service, tmp_path)
    yield server
    stop_api(server)


@pytest.fixture
def sqlite_api(sqlite_service: Service, tmp_path: Path) -> Iterator[Api]:
    server = start_api(sqlite_service, tmp_path)
    yield server
    stop_api(server)
