"""`dinfer-batch run` and `dinfer-batch model` on a DiffusionGemma checkpoint
(docs/adr/027-diffusion-gemma.md): its fields per line, the refusals per line, structured
outputs (docs/adr/043-structured-outputs-on-uniform-noise.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.engine_requests import asked
from tests.json_models import write_json_diffusion_gemma
from tests.service_fixtures import _service
from tests.service_helpers import read_jsonl, write_jsonl
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp("gemma"))


@pytest.fixture
def gemma_service(sqlite_url: str, gemma_dir: Path) -> Iterator[Any]:
    yield from _service(sqlite_url, gemma_dir)


def test_run_answers_lines_and_refuses_what_the_family_cannot_do(gemma_service: Any,
                                                                  gemma_dir: Path,
                                                                  tmp_path: Path) -> None:
    from dinfer_engine import Engine, GenerationConfig

    lines = [
        {"custom_id": "plain", "prompt": "abc", "max_tokens": 16, "seed": 3, "t_min": 0.3},
        {"custom_id": "decoder", "prompt": "abc", "decoder": "threshold"},
        {"custom_id": "cache", "prompt": "abc", "cache": "dual"},
        {"custom_id": "infill", "prompt": "ab", "suffix": "cd"},
        {"custom_id": "structured", "prompt": "abc", "seed": 1,
         "structured_outputs": {"regex": "[a-c]{2}[0-9]"}},
        {"custom_id": "image", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        {"custom_id": "schedule", "prompt": "abc", "t_min": 0.9, "t_max": 0.5},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = gemma_service.cli("run", path, "-o", out, "--errors", errors,
                               "--max-denoising-steps", "4")  # the job's, the line's t_min
    assert result.exit_code == 0, result.output
    ok, structured = read_jsonl(out)
    assert structured["custom_id"] == "structured"
    assert re.fullmatch("[a-c]{2}[0-9]", structured["response"]["body"]["choices"][0]["text"])
    expected = Engine.from_pretrained(gemma_dir).generate(
        asked(["abc"], seeds=[3]),
        GenerationConfig(gen_length=16, max_denoising_steps=4, t_min=0.3))[0]
    assert ok["custom_id"] == "plain"
    assert ok["response"]["body"]["choices"][0]["text"] == expected.text
    assert ok["response"]["body"]["metrics"]["nfe"] == expected.nfe
    failed = {line["custom_id"]: line["error"]["message"] for line in read_jsonl(errors)}
    assert "decoder does not apply to DiffusionGemma" in failed["decoder"]
    assert "cache does not apply to DiffusionGemma" in failed["cache"]
    assert "infill (suffix)" in failed["infill"]
    assert "no images" in failed["image"]
    assert "t_min and t_max" in failed["schedule"]
    assert len(failed) == len(lines) - 2


def test_model_shows_the_family_and_its_canvas_defaults(gemma_service: Any) -> None:
    shown = gemma_service.cli("model").output
    assert "family   DiffusionGemma" in shown
    assert "max_denoising_steps 10" in shown and "entropy_bound 0.5" in shown
    defaults = json.loads(gemma_service.cli("model", "--json").output)["defaults"]
    assert defaults["confidence_threshold"] == 0.1 and defaults["t_max"] == 0.8


def test_response_format_lines_validate_and_free_lines_are_unchanged(
        sqlite_url: str, tmp_path: Path) -> None:
    from dinfer_engine import Engine, GenerationConfig

    json_dir = write_json_diffusion_gemma(tmp_path / "json_gemma")
    person = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                 "minItems": 1, "maxItems": 2}},
        "required": ["name", "age", "tags"], "additionalProperties": False}
    lines = [
        {"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "x", "messages": [{"role": "user", "content": "a person"}],
                  "seed": 5, "response_format": {"type": "json_schema", "json_schema": {
                      "name": "person", "schema": person, "strict": True}}}},
        {"custom_id": "object", "prompt": "any object", "seed": 6,
         "response_format": {"type": "json_object"}},
        {"custom_id": "free", "prompt": "anything", "seed": 7},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    for service in _service(sqlite_url, json_dir):
        result = service.cli("run", path, "-o", out, "--max-tokens", "64")
        assert result.exit_code == 0, result.output
    bodies = {line["custom_id"]: line["response"]["body"] for line in read_jsonl(out)}
    chat = bodies["chat"]["choices"][0]
    assert chat["finish_reason"] == "stop"
    jsonschema.validate(json.loads(chat["message"]["content"]), person)
    assert bodies["object"]["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(bodies["object"]["choices"][0]["text"]), dict)
    expected = Engine.from_pretrained(json_dir).generate(asked(["anything"], seeds=[7]),
                                                         GenerationConfig(gen_length=64))[0]
    assert bodies["free"]["choices"][0]["text"] == expected.text
