"""The service's fixtures (tests/service_fixtures.py) for every test in this folder."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from dinfer_batch.jobs.running import result_writer
from tests.service_fixtures import *  # noqa: F403


@pytest.fixture(autouse=True)
def writer_threads_end_with_their_test(monkeypatch):
    """Each chunk runner's writer thread (its result writes, an ended job's measure) ends
    with the test that made it: a thread left running stops a later test's ingest from
    forking."""
    made: list[ThreadPoolExecutor] = []

    def executor(*args, **kwargs):
        made.append(ThreadPoolExecutor(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(result_writer, "ThreadPoolExecutor", executor)
    yield
    for writes in made:
        writes.shutdown(wait=True)
