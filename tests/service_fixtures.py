"""Fixtures for the service tests: an isolated database (SQLite file or a fresh PostgreSQL
database) and an isolated queue on the real Redis; the conftest.py of tests/service/,
tests/api/ and tests/fleet/ offers them to the tests there."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import psycopg
import pytest
import redis

from dinfer_batch.storage import db
from tests.private_pgbouncer import PrivatePgBouncer
from tests.private_postgres import PrivatePostgres
from tests.service_helpers import REDIS_URL, Service

# a database the tests may connect to in order to create (and drop) one of their own
POSTGRES_ADMIN = os.environ.get("DINFER_BATCH_TEST_POSTGRES",
                                "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
        return
    name = f"dinfer_test_{uuid.uuid4().hex[:12]}"
    admin_url = psycopg.conninfo.conninfo_to_dict(POSTGRES_ADMIN)
    url = (f"postgresql+psycopg://{admin_url.get('user', 'postgres')}@"
           f"{admin_url.get('host', '127.0.0.1')}:{admin_url.get('port', 5432)}/{name}")
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        db.db_engine(url).dispose()
        db.db_engine.cache_clear()
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue name of this test's own on the real Redis, emptied afterwards."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    with suppress(redis.ConnectionError):  # no Redis: the test queued nothing there
        redis.Redis.from_url(REDIS_URL).delete(name)


def _service(url: str, tiny_checkpoint: Path) -> Iterator[Service]:
    queue = f"test_{uuid.uuid4().hex[:12]}"
    env = {"DINFER_BATCH_DATABASE_URL": url, "DINFER_BATCH_BROKER_URL": REDIS_URL,
           "DINFER_BATCH_QUEUE": queue, "DINFER_BATCH_MODEL": str(tiny_checkpoint),
           # one torch thread per worker: on a small shared machine more threads wait on
           # each other far more than they compute
           "OMP_NUM_THREADS": "1"}
    service = Service(env=env, queue=queue, model=tiny_checkpoint)
    if not url.startswith("sqlite"):
        assert service.cli("db", "upgrade").exit_code == 0
    try:
        yield service
    finally:
        service.stop_workers()
        with suppress(redis.ConnectionError):  # no Redis: the test queued nothing there
            redis.Redis.from_url(REDIS_URL).delete(queue)


@pytest.fixture
def service(database_url: str, tiny_checkpoint: Path) -> Iterator[Service]:
    """A service on SQLite, then on PostgreSQL."""
    yield from _service(database_url, tiny_checkpoint)


@pytest.fixture
def sqlite_service(sqlite_url: str, tiny_checkpoint: Path) -> Iterator[Service]:
    yield from _service(sqlite_url, tiny_checkpoint)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running PostgreSQL server of the test's own, which the test may stop and start."""
    server = PrivatePostgres.create()
    try:
        server.start()
        yield server
    finally:
        db.db_engine.cache_clear()
        server.remove()


@pytest.fixture
def private_postgres_service(private_postgres: PrivatePostgres,
                             tiny_checkpoint: Path) -> Iterator[Service]:
    yield from _service(private_postgres.url, tiny_checkpoint)


@pytest.fixture
def private_pgbouncer(private_postgres: PrivatePostgres) -> Iterator[PrivatePgBouncer]:
    """A running PgBouncer of the test's own in transaction pooling, in front of the
    test's own PostgreSQL server; the test may stop and start either."""
    bouncer = PrivatePgBouncer.create(private_postgres.port)
    try:
        bouncer.start()
        yield bouncer
    finally:
        db.db_engine.cache_clear()
        bouncer.remove()


@pytest.fixture(params=["direct", "pgbouncer"])
def routed_service(request: pytest.FixtureRequest, private_postgres: PrivatePostgres,
                   tiny_checkpoint: Path) -> Iterator[Service]:
    """A service on the test's own PostgreSQL server, reached directly, then through a
    PgBouncer in transaction pooling (as docs/fleet.md's fleet reaches it)."""
    url = private_postgres.url
    if request.param == "pgbouncer":
        url = request.getfixturevalue("private_pgbouncer").url
    yield from _service(url, tiny_checkpoint)
