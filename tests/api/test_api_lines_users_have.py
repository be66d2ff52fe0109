"""Lines as users have them, through the OpenAI Batch API with the official `openai`
client against a real server and worker (docs/adr/059-any-maximum-and-the-jobs-endpoint.md):
Mistral's url-less lines take the batch's endpoint, maxima that are no multiple of the
block are upper bounds, and completions take lists of prompts, token ids, echo and
best_of, each body what `client.completions.create` itself takes."""

import json

import pytest
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsBase as ChatParams,
)
from openai.types.completion_create_params import CompletionCreateParamsBase

from tests.service_helpers import wait_for, write_jsonl

pytestmark = pytest.mark.integration


def batch_lines(client, tmp_path, lines, endpoint, **extra):
    path = write_jsonl(tmp_path / f"{endpoint.strip('/').replace('/', '_')}.jsonl", lines)
    uploaded = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint,
                                  completion_window="24h", extra_body=extra)
    wait_for(lambda: client.batches.retrieve(batch.id).status in ("completed", "failed"),
             300, poll=0.3)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    text = client.files.content(batch.output_file_id).text
    return {line["custom_id"]: line for line in map(json.loads, text.splitlines())}


def test_openai_client_batches_of_lines_users_have(sqlite_api, tmp_path):
    api = sqlite_api
    api.service.start_worker(tmp_path / "worker.log")
    client = api.client()
    mistral = [{"custom_id": str(i), "body": {"max_tokens": 100, "messages": [
        {"role": "user", "content": f"What is the best French {what}?"}]}}
        for i, what in enumerate(("cheese", "wine"))]
    assert all(line["body"].keys() <= ChatParams.__annotations__.keys() for line in mistral)
    chats = batch_lines(client, tmp_path, mistral, "/v1/chat/completions")
    for line in chats.values():
        assert line["error"] is None
        assert line["response"]["body"]["usage"]["completion_tokens"] <= 100

    bodies = {"list": {"prompt": ["add 1 2=", "hi"], "n": 2, "max_tokens": 50, "seed": 1},
              "ids": {"prompt": [[5, 6, 7], [8, 9]], "max_tokens": 7},
              "echo": {"prompt": "echo me", "echo": True, "max_tokens": 5},
              "best": {"prompt": "x", "best_of": 3, "n": 2, "temperature": 1.0,
                       "max_tokens": 9, "seed": 2}}
    for body in bodies.values():
        assert body.keys() <= CompletionCreateParamsBase.__annotations__.keys()
    lines = [{"custom_id": name, "method": "POST", "url": "/v1/completions",
              "body": body | {"model": "tiny"}} for name, body in bodies.items()]
    done = batch_lines(client, tmp_path, lines, "/v1/completions", block_length=8)
    answers = {name: line["response"]["body"] for name, line in done.items()}
    assert [c["index"] for c in answers["list"]["choices"]] == [0, 1, 2, 3]
    assert answers["list"]["metrics"]["seeds"] == [1, 2, 1, 2]
    assert all(c["finish_reason"] in ("stop", "length") for c in answers["list"]["choices"])
    assert answers["list"]["usage"]["completion_tokens"] <= 4 * 50
    assert len(answers["ids"]["choices"]) == 2
    assert answers["echo"]["choices"][0]["text"].startswith("echo me")
    assert len(answers["best"]["choices"]) == 2 and answers["best"]["metrics"]["cost"] == 3
    assert set(answers["best"]["metrics"]["seeds"]) <= {2, 3, 4}
