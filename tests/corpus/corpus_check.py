"""The corpus's lines as test cases, and what an output line must be for its expectation
(tests/corpus/expected.py): an OpenAI answer whose structured parts are valid (a
JSON-schema answer that finished is valid JSON for its schema; one cut by its length is
left alone, a prefix), or an error whose message names what the line asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from dinfer_batch.cli import main
from tests.corpus.expected import EXPECTED, Expect

LINES = Path(__file__).parent / "lines"


def corpus_lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (LINES / name).read_text().splitlines()]


def run_file(path: Path, model: str, folder: Path, *options: str) -> list[dict[str, Any]]:
    """`dinfer-batch run PATH -o OUT --model MODEL OPTIONS` through the command line's
    entry in this process (its engine cache keeps each model loaded), on a SQLite file
    and data directory in `folder`; the output lines."""
    out = folder / f"{Path(model).name}-{path.name}"
    env = {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{folder / 'jobs.db'}",
           "XDG_DATA_HOME": str(folder / "data")}
    ran = CliRunner().invoke(main, ["run", str(path), "-o", str(out), "--model", model,
                                    *options], env=env)
    assert out.exists(), ran.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def line_id(line: dict[str, Any], number: int) -> str:
    """The id a result carries: the line's custom_id, else line-N (ADR 052)."""
    return line.get("custom_id") or f"line-{number}"


def cases(models: list[str]) -> list[Any]:
    """pytest params (model, file, custom_id)."""
    params = []
    for model in models:
        for name, lines in EXPECTED.items():
            for custom_id in lines:
                params.append(pytest.param(model, name, custom_id,
                                           id=f"{model}-{name[:-6]}-{custom_id}"))
    return params


def check(output: dict[str, Any], line: dict[str, Any], expect: Expect) -> None:
    error = output.get("error")
    if not expect.answers:
        assert error is not None, f"answered, but should be refused: {output}"
        message = error["message"].lower()
        missing = [word for word in expect.says if word.lower() not in message]
        assert not missing, f"refusal does not name {missing}: {error['message']}"
        return
    assert error is None, error["message"]
    assert output["response"]["status_code"] == 200
    body = output["response"]["body"]
    request = line.get("body", line)
    if body.get("object") == "response":
        _check_response(body, request)
    else:
        _check_choices(body, request)


def _check_choices(body: dict[str, Any], request: dict[str, Any]) -> None:
    assert body["choices"], body
    for choice in body["choices"]:
        assert choice["finish_reason"] in ("stop", "length", "tool_calls"), choice
        text = choice["text"] if "text" in choice else choice["message"]["content"]
        if choice["finish_reason"] == "stop":
            _check_structured(text, request.get("response_format"))


def _check_response(body: dict[str, Any], request: dict[str, Any]) -> None:
    assert body["status"] in ("completed", "incomplete"), body
    texts = [part["text"] for item in body["output"] if item["type"] == "message"
             for part in item["content"]]
    assert texts, body
    if body["status"] == "completed":
        text_format = request.get("text", {}).get("format")
        if text_format and text_format.get("type") == "json_schema":
            text_format = {"type": "json_schema", "json_schema": text_format}
        _check_structured(texts[0], text_format)


def _check_structured(text: str, response_format: dict[str, Any] | None) -> None:
    """A finished answer to a JSON response_format parses, and fits its schema."""
    if not response_format or response_format.get("type") == "text":
        return
    value = json.loads(text)
    if response_format["type"] == "json_object":
        assert isinstance(value, dict), text
    else:
        jsonschema.validate(value, response_format["json_schema"]["schema"])
