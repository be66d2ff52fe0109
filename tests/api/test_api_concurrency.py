"""The operations endpoints under load (#17): 100 concurrent unauthenticated requests to
each of them while a batch runs are all answered, none slowly; public metrics name models
by their names; SIGTERM stops a loaded server within seconds."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.api_helpers import start_api
from tests.service_helpers import wait_for, write_jsonl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CONCURRENT = 100
SLOW_S = 10.0  # "a few seconds" on a loaded 2-core test machine; a hang is minutes


def timed_get(url: str, headers: dict[str, str]) -> tuple[int, float]:
    start = time.monotonic()
    status = httpx.get(url, headers=headers, timeout=60).status_code
    return status, time.monotonic() - start


def test_operations_routes_answer_100_concurrent_strangers_while_a_batch_runs(
        sqlite_service, tmp_path):
    service = sqlite_service
    service.start_worker(tmp_path / "worker.log", DINFER_BATCH_ENGINE=
                         "tests.paced_engine:PacedEngine", DINFER_TEST_ITEM_SECONDS="0.05",
                         PYTHONPATH=str(REPO))
    api = start_api(service, tmp_path, DINFER_BATCH_METRICS_PUBLIC="1")
    try:
        client = api.client()
        path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"add {i} 1=", "max_tokens": 8,
                                                    "block_length": 8} for i in range(60)])
        file = client.files.create(file=path.open("rb"), purpose="batch")
        batch = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                      completion_window="24h")
        wait_for(lambda: client.batches.retrieve(batch.id).request_counts.completed > 0, 60)
        strangers = [({}, "/healthz", {200}), ({}, "/readyz", {200}), ({}, "/metrics", {200}),
                     ({"Authorization": "Bearer sk-wrong"}, "/v1/batches", {401}),
                     ({}, "/v1/files", {401})]
        with ThreadPoolExecutor(CONCURRENT) as pool:
            for headers, route, statuses in strangers:
                answers = list(pool.map(lambda _, r=route, h=headers: timed_get(
                    api.url + r, h), range(CONCURRENT)))
                assert {status for status, _ in answers} <= statuses, (route, answers[:3])
                slowest = max(seconds for _, seconds in answers)
                assert slowest < SLOW_S, (route, slowest)
        assert client.batches.retrieve(batch.id).status in ("in_progress", "finalizing",
                                                            "completed")
        wait_for(lambda: client.batches.retrieve(batch.id).status == "completed", 120)
        time.sleep(5.5)  # past the metrics cache
        metrics = httpx.get(f"{api.url}/metrics").text
        assert f'model="{service.model.name}"' in metrics
        assert str(service.model.parent) not in metrics  # a name, never this machine's path
        assert "dinfer_batch_live_workers 1.0" in metrics  # from the SQL heartbeats

        # SIGTERM with requests in flight: the server is gone within seconds
        with ThreadPoolExecutor(CONCURRENT) as pool:
            for _ in range(CONCURRENT):
                pool.submit(lambda: httpx.get(f"{api.url}/metrics", timeout=30))
            api.process.send_signal(signal.SIGTERM)
            start = time.monotonic()
            api.process.wait(30)
            assert time.monotonic() - start < SLOW_S
    finally:
        if api.process.poll() is None:
            api.process.kill()
