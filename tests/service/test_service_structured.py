"""Structured outputs through the service: OpenAI `response_format` and vLLM
`structured_outputs` lines, and `--json-schema` / `--regex` / `--choice` for a whole job,
run by `dinfer-batch run` on a random checkpoint that can spell JSON; answers are the
JSON text in message.content / text, which pydantic validates as the official client's
`parse` does. A schema we cannot honour fails its line at submit, naming the keyword; a
schedule's runs keep the schema."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from dinfer_batch.schedules.beat import manual_run
from tests.json_models import write_json_model
from tests.service_fixtures import _service
from tests.service_helpers import Service, env_broker, env_settings, read_jsonl, write_jsonl


class Person(BaseModel):
    name: str = Field(max_length=8)
    age: int
    tags: list[str] = Field(min_length=1, max_length=2)


def person_format() -> dict:
    return {"type": "json_schema", "json_schema": {
        "name": "person", "schema": Person.model_json_schema(), "strict": True}}


@pytest.fixture
def json_service(sqlite_url: str, tmp_path: Path) -> Iterator[Service]:
    yield from _service(sqlite_url, write_json_model(tmp_path / "json_model"))


def run(service: Service, tmp_path: Path, lines: list, *options: str
        ) -> tuple[list[dict], list[dict]]:
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = service.cli("run", path, "-o", out, "--errors", errors, "--max-tokens", "96",
                         "--block-length", "16", "--steps", "48", *options)
    assert result.exit_code in (0, 1), result.output
    return read_jsonl(out), (read_jsonl(errors) if errors.exists() else [])


def test_response_format_and_structured_outputs_lines(json_service, tmp_path):
    lines = [
        {"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "x", "messages": [{"role": "user", "content": "a person"}],
                  "response_format": person_format()}},
        {"custom_id": "legacy", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "yes or no", "structured_outputs": {"choice": ["yes", "no"]}}},
        {"custom_id": "object", "prompt": "any object", "response_format":
            {"type": "json_object"}},
        {"custom_id": "code", "prompt": "a code", "structured_outputs": {"regex": "[a-c]{3}"},
         "n": 2},
        {"custom_id": "free", "prompt": "anything"},
        {"custom_id": "unique", "prompt": "x", "response_format": {
            "type": "json_schema", "json_schema": {"name": "n", "schema": {
                "type": "array", "uniqueItems": True}}}},
    ]
    ok, failed = run(json_service, tmp_path, lines)
    bodies = {line["custom_id"]: line["response"]["body"] for line in ok}
    chat = bodies["chat"]["choices"][0]
    assert chat["finish_reason"] == "stop"
    person = Person.model_validate_json(chat["message"]["content"])  # what parse() does
    assert 1 <= len(person.tags) <= 2
    assert bodies["legacy"]["choices"][0]["text"] in ("yes", "no")
    assert isinstance(json.loads(bodies["object"]["choices"][0]["text"]), dict)
    assert [c["text"] for c in bodies["code"]["choices"]] == [
        c["text"] for c in bodies["code"]["choices"] if re.fullmatch("[a-c]{3}", c["text"])]
    assert len(bodies["code"]["choices"]) == 2
    assert "free" in bodies
    [unique] = failed
    assert unique["custom_id"] == "unique"
    assert "keyword 'uniqueItems' is not supported" in unique["error"]["message"]
    assert unique["error"]["message"].startswith("line 6: response_format.json_schema")


def test_job_options_constrain_every_line_that_has_none(json_service, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(Person.model_json_schema()))
    lines = [{"custom_id": f"p{i}", "prompt": f"person {i}"} for i in range(3)]
    lines.append({"custom_id": "own", "prompt": "pick",
                  "structured_outputs": {"choice": ["left", "right"]}})
    ok, failed = run(json_service, tmp_path, lines, "--json-schema", str(schema))
    assert failed == []
    texts = {line["custom_id"]: line["response"]["body"]["choices"][0]["text"] for line in ok}
    for i in range(3):
        Person.model_validate_json(texts[f"p{i}"])
    assert texts["own"] in ("left", "right")
    ok, _ = run(json_service, tmp_path, lines[:2], "--choice", "red,green, blue")
    assert {line["response"]["body"]["choices"][0]["text"] for line in ok} <= {
        "red", "green", "blue"}


def test_bad_job_options_are_refused_before_anything_runs(json_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "x"}])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "string", "format": "regex"}))
    result = json_service.cli("run", path, "--json-schema", str(bad))
    assert result.exit_code == 2 and "format 'regex' is not supported" in result.output
    result = json_service.cli("run", path, "--regex", "a", "--choice", "b")
    assert result.exit_code == 2 and "--regex and --choice are both set" in result.output
    result = json_service.cli("run", path, "--json-schema", str(tmp_path / "missing.json"))
    assert result.exit_code == 2 and "cannot read" in result.output


def test_a_schedules_runs_keep_its_schema(json_service, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(Person.model_json_schema()))
    topics = write_jsonl(tmp_path / "vars.jsonl", [{"who": "a cook"}, {"who": "a pilot"}])
    added = json_service.cli("schedule", "add", "people", "--every", "1h", "--template",
                             "Describe {who}:", "--vars", topics, "--json-schema", schema,
                             "--overlap")
    assert added.exit_code == 0, added.output
    schema.unlink()  # the schedule holds the schema itself, not the file
    for _ in range(2):
        with env_broker() as broker:
            ran = manual_run(json_service.sessions(), broker, "people", env_settings())
        assert ran.status == "created", ran.reason
        job = json_service.job(ran.job_id)
        assert json.loads(job.params["structured"]["source"]) == Person.model_json_schema()


def test_a_constraint_with_editing_or_infill_fails_its_line_alone(json_service, tmp_path):
    choice = {"choice": ["yes", "no"]}
    lines = [{"custom_id": "editing", "prompt": "p", "structured_outputs": choice,
              "decoder": "editing"},
             {"custom_id": "preset", "prompt": "p", "structured_outputs": choice,
              "preset": "quality"},
             {"custom_id": "infill", "prompt": "p", "suffix": "s",
              "structured_outputs": choice},
             {"custom_id": "fine", "prompt": "p", "structured_outputs": choice}]
    out, errors = run(json_service, tmp_path, lines)
    assert [line["custom_id"] for line in out] == ["fine"]
    messages = {line["custom_id"]: line["error"]["message"] for line in errors}
    assert "cannot use the editing decoder" in messages["editing"]
    assert "cannot use the editing decoder" in messages["preset"]
    assert "not to infill (suffix) gaps" in messages["infill"]
