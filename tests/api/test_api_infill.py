"""Fill in the middle through the OpenAI Batch API, with the official `openai` client
against a real `dinfer-batch api` server and a real worker: completions lines with
OpenAI's own `suffix` field come back as text_completions whose text is the middle."""

import json

import pytest
from openai.types.completion_create_params import CompletionCreateParamsBase

from dinfer_engine import Engine, GenerationConfig, Infill
from tests.service_helpers import wait_for, write_jsonl

pytestmark = pytest.mark.integration


def test_openai_client_batch_of_suffix_lines(sqlite_api, tiny_checkpoint, tmp_path):
    api = sqlite_api
    api.service.start_worker(tmp_path / "worker.log")
    client = api.client()
    pairs = [("def f(a", "):\n    return a"), ("add 1 ", "=3"), ("x = [", "]")]
    bodies = [{"model": "tiny", "prompt": before, "suffix": after, "max_tokens": 8,
               "temperature": 0} for before, after in pairs]
    for body in bodies:  # what client.completions.create(...) takes, nothing else
        assert body.keys() <= CompletionCreateParamsBase.__annotations__.keys()
    lines = [{"custom_id": f"fim-{i}", "method": "POST", "url": "/v1/completions",
              "body": body} for i, body in enumerate(bodies)]
    path = write_jsonl(tmp_path / "fim.jsonl", lines)
    uploaded = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions",
                                  completion_window="24h", extra_body={"block_length": 8})
    wait_for(lambda: client.batches.retrieve(batch.id).status in ("completed", "failed"),
             180, poll=0.3)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == 3
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]

    engine = Engine.from_pretrained(tiny_checkpoint)
    expected = engine.generate([Infill([before, after]) for before, after in pairs],
                               GenerationConfig(gen_length=8, block_length=8, temperature=0))
    for line, want in zip(out, expected, strict=True):
        body = line["response"]["body"]
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] == want.text
        assert body["choices"][0]["gaps"] == want.gaps
        assert body["metrics"]["infill"] == [{"spans": [8], "length_search": None}]
