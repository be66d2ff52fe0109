"""Lines copied from public docs, through `python -m dinfer_batch run` on the demo model
(docs/adr/059-any-maximum-and-the-jobs-endpoint.md): vLLM's example batch file
(examples/offline_inference/openai_batch/openai_example_batch.jsonl, whose lines ask for
`max_completion_tokens: 1000`), Mistral's batch lines (docs.mistral.ai, "Batch
inference": `custom_id` and `body`, the endpoint the job's), OpenAI's legacy completions
with a list of prompts, token ids, `echo` and `best_of`, and maxima that are no multiple
of the block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from dinfer_models import MODELS_DIR
from tests.service_helpers import read_jsonl, write_jsonl

pytestmark = pytest.mark.slow  # two runs of the demo model in their own processes

REPO = Path(__file__).resolve().parents[2]
VLLM = [{"custom_id": f"request-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "meta-llama/Meta-Llama-3-8B-Instruct", "messages": [
             {"role": "system", "content": f"You are a{kind} assistant."},
             {"role": "user", "content": "Hello world!"}], "max_completion_tokens": 1000}}
        for i, kind in ((1, " helpful"), (2, "n unhelpful"))]
MISTRAL = [{"custom_id": str(i), "body": {"max_tokens": 100, "messages": [
    {"role": "user", "content": f"What is the best French {what}?"}]}}
    for i, what in enumerate(("cheese", "wine"))]


def run(tmp_path: Path, lines: list[dict[str, Any]], *args: str) -> dict[str, dict[str, Any]]:
    """Each output line of `dinfer-batch run` over `lines`, by custom_id."""
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    env = os.environ | {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}"}
    done = subprocess.run([sys.executable, "-m", "dinfer_batch", "run", str(path), "-o",
                           str(out), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    return {line["custom_id"]: line for line in read_jsonl(out)}


def body(line: dict[str, Any]) -> dict[str, Any]:
    assert line["error"] is None, line["error"]
    return line["response"]["body"]


def test_vllms_and_mistrals_batch_files_run_unchanged(tmp_path):
    """On the demo model with a context of 2,048 (its own is 256): vLLM's lines and
    Mistral's url-less ones answer within their maxima; a line of another endpoint than
    the job's fails alone, naming both."""
    model = tmp_path / "demo_2048"
    model.mkdir()
    for file in (MODELS_DIR / "demo").iterdir():
        if file.is_file():
            (model / file.name).write_bytes(file.read_bytes())
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"max_sequence_length": 2048}))
    other = {"custom_id": "c", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": "x"}}
    lines = run(tmp_path, [*VLLM, *MISTRAL, other], "--model", str(model),
                "--endpoint", "/v1/chat/completions")
    for name, most in (("request-1", 1000), ("request-2", 1000), ("0", 100), ("1", 100)):
        answer = body(lines[name])
        assert answer["object"] == "chat.completion"
        assert answer["usage"]["completion_tokens"] <= most
        assert answer["choices"][0]["finish_reason"] in ("stop", "length")
    assert lines["c"]["error"]["message"] == (
        "line 5: a /v1/chat/completions batch takes /v1/chat/completions requests only, not "
        "/v1/completions")


def test_completions_lines_as_openai_documents_them(tmp_path):
    """The shipped demo (blocks of 8, a context of 256): vLLM's lines are refused for the
    context alone, as vLLM refuses them; a list of prompts answers as its prompts do one
    by one; token ids as their text; echo, best_of and maxima of 7, 50 and 100."""
    ids = AutoTokenizer.from_pretrained(MODELS_DIR / "demo")("add 2 2=")["input_ids"]
    sampled = {"max_tokens": 7, "n": 2, "seed": 3, "temperature": 0.7}
    lines = run(tmp_path, [
        *VLLM,
        {"custom_id": "list", "prompt": ["add 12 30=", "add 2 2="], **sampled},
        {"custom_id": "alone", "prompt": "add 12 30=", **sampled},
        {"custom_id": "ids", "body": {"prompt": [ids], "max_tokens": 9}},
        {"custom_id": "text", "body": {"prompt": "add 2 2=", "max_tokens": 9}},
        {"custom_id": "echo", "prompt": "add 3 4=", "echo": True, "logprobs": 1},
        {"custom_id": "best", "prompt": "add 5 6=", "best_of": 3, "temperature": 1.0,
         "seed": 5, "max_tokens": 9},
        *({"custom_id": f"max-{m}", "prompt": "add 1 1=", "max_tokens": m} for m in (7, 50, 100)),
    ])
    for name in ("request-1", "request-2"):
        assert "max_completion_tokens=1,000 asks for 1,000 answer tokens" in \
            lines[name]["error"]["message"]
    listed = body(lines["list"])["choices"]
    assert [c["index"] for c in listed] == [0, 1, 2, 3]
    assert [c["text"] for c in listed[:2]] == [c["text"] for c in body(lines["alone"])["choices"]]
    assert body(lines["list"])["metrics"]["seeds"] == [3, 4, 3, 4]
    assert body(lines["ids"])["choices"][0]["text"] == body(lines["text"])["choices"][0]["text"]
    echoed = body(lines["echo"])["choices"][0]
    assert echoed["text"].startswith("add 3 4=")
    assert echoed["logprobs"]["token_logprobs"][0] is None
    best = body(lines["best"])
    assert best["metrics"]["cost"] == 3 and best["metrics"]["seeds"][0] in (5, 6, 7)
    for maximum in (7, 50, 100):
        answer = body(lines[f"max-{maximum}"])
        assert answer["usage"]["completion_tokens"] <= maximum
