"""Every corpus line (tests/corpus/lines/, SOURCES.md) through the HTTP API with the
official `openai` client, on the demo model: each file uploaded as it is (split by the
endpoint its lines name, as OpenAI's batches take one endpoint each; a line with no url
goes with the endpoint its body implies, a line naming an endpoint no model here serves
with the chat batch), run by a real worker, and each line found in the output or the
error file: answered, or refused by name (tests/corpus/expected.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

import dinfer_models
from dinfer_batch.formats.lines.requests import UNVERSIONED, URLS
from tests.api_helpers import Api, start_api, stop_api
from tests.corpus.corpus_check import LINES, cases, check, corpus_lines, line_id
from tests.corpus.expected import EXPECTED
from tests.service_fixtures import _service
from tests.service_helpers import wait_for, write_jsonl

pytestmark = pytest.mark.integration

DEMO = Path(dinfer_models.__file__).parent / "demo"
ENDED = {"completed", "failed", "expired", "cancelled"}
Outputs = Callable[[str], dict[str, dict[str, Any]]]


def endpoint(line: dict[str, Any]) -> str:
    url = line.get("url")
    url = UNVERSIONED.get(url, url) if isinstance(url, str) else url
    if url in URLS:
        return str(url)
    body = line.get("body", line)
    if url is None and "prompt" in body:
        return "/v1/completions"
    return "/v1/chat/completions"


def run_batch(client: OpenAI, path: Path, url: str) -> list[dict[str, Any]]:
    """One batch of the file at `path` on endpoint `url`: its output and error lines."""
    uploaded = client.files.create(file=path.open("rb"), purpose="batch")
    batch_id = client.batches.create(input_file_id=uploaded.id, endpoint=url,  # type: ignore[arg-type]
                                     completion_window="24h").id
    wait_for(lambda: client.batches.retrieve(batch_id).status in ENDED, 300, 0.5)
    batch = client.batches.retrieve(batch_id)
    return [json.loads(text) for file_id in (batch.output_file_id, batch.error_file_id)
            if file_id for text in client.files.content(file_id).text.splitlines()]


@pytest.fixture(scope="module")
def demo_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    folder = tmp_path_factory.mktemp("corpus_api")
    for service in _service(f"sqlite:///{folder / 'jobs.db'}", DEMO):
        api = start_api(service, folder)
        service.start_worker(folder / "worker.log")
        try:
            yield api
        finally:
            stop_api(api)


@pytest.fixture(scope="module")
def outputs(demo_api: Api, tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    """file -> {custom_id: output or error line}, each file's batches run once."""
    folder = tmp_path_factory.mktemp("corpus_api_files")
    client = demo_api.client()
    done: dict[str, dict[str, dict[str, Any]]] = {}

    def run(name: str) -> dict[str, dict[str, Any]]:
        if name in done:
            return done[name]
        groups: dict[str, list[dict[str, Any]]] = {}
        for line in corpus_lines(name):
            groups.setdefault(endpoint(line), []).append(line)
        found: dict[str, dict[str, Any]] = {}
        for index, (url, lines) in enumerate(groups.items()):
            path = write_jsonl(folder / f"{index}-{name}", lines)
            found |= {o["custom_id"]: o for o in run_batch(client, path, url)}
        done[name] = found
        return found

    return run


@pytest.mark.parametrize("model,name,custom_id", cases(["api"]))
def test_corpus_line_through_the_api(outputs: Outputs, model: str, name: str,
                                     custom_id: str) -> None:
    lines = corpus_lines(name)
    line = next(line for i, line in enumerate(lines, 1) if line_id(line, i) == custom_id)
    found = outputs(name)
    assert custom_id in found, sorted(found)
    check(found[custom_id], line, EXPECTED[name][custom_id])


def test_every_file_is_a_corpus_file() -> None:
    assert sorted(p.name for p in LINES.glob("*.jsonl")) == sorted(EXPECTED)
