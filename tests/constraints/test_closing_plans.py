"""Open objects close where their shortest answer fits (dinfer_engine/constraints/closing.py's
search, ADR 049): schemas whose optional properties come before the required ones (the
greedy path writes every optional property llguidance offers first), arrays of open
objects with minItems, and patternProperties beside optional properties, on a random
checkpoint whose canvas holds the shortest answer but not the greedy path's. Every
"stop" answer validates; the search's plans fit their limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.closing import completer
from dinfer_engine.constraints.grammar import Matcher
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.engine_requests import asked
from tests.json_models import write_json_model

GEN_LENGTH = 40
# each schema with its shortest answer (at most GEN_LENGTH - 1 bytes: the stop token
# needs a column) and the greedy path's, longer than that
SCHEMAS: dict[str, tuple[dict[str, Any], str, str]] = {
    "optional_first": (
        {"type": "object", "properties": {
            "alpha": {"type": "string"}, "beta": {"type": "integer"},
            "gamma": {"type": "object"}, "zed": {"type": "integer"}}, "required": ["zed"]},
        '{"zed":0}', '{"alpha":"","beta":0,"gamma":{},"zed":0}'),
    "nested": (
        {"type": "object", "properties": {
            "meta": {"type": "object", "properties": {
                "a": {"type": "string"}, "b": {"type": "array"}, "id": {"type": "integer"}},
                "required": ["id"]},
            "tags": {"type": "array", "minItems": 1, "items": {
                "type": "object", "properties": {"aa": {"type": "string"},
                                                 "k": {"type": "string"}},
                "required": ["k"]}}},
         "required": ["tags", "meta"]},
        '{"meta":{"id":0},"tags":[{"k":""}]}',
        '{"meta":{"a":"","b":[],"id":0},"tags":[{"aa":"","k":""}]}'),
    "array_of_open_objects": (
        {"type": "array", "minItems": 3, "items": {
            "type": "object", "properties": {"a": {"type": "object"},
                                             "k": {"type": "integer"}},
            "required": ["k"]}},
        '[{"k":0},{"k":0},{"k":0}]', '[{"a":{},"k":0},{"a":{},"k":0},{"a":{},"k":0}]'),
    "pattern_properties": (
        {"type": "object", "patternProperties": {"^x[a-z]*$": {"type": "integer"}},
         "properties": {"alpha": {"type": "string"}, "beta": {"type": "object"},
                        "gamma": {"type": "array"}, "name": {"type": "string"}},
         "required": ["name"]},
        '{"name":""}', '{"alpha":"","beta":{},"gamma":[],"name":""}'),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(Path(tmp_path_factory.mktemp("json"))))


def test_the_schemas_shortest_answers_fit_and_their_greedy_paths_do_not():
    for schema, shortest, greedy in SCHEMAS.values():
        jsonschema.validate(json.loads(shortest), schema)
        jsonschema.validate(json.loads(greedy), schema)
        assert len(shortest) < GEN_LENGTH <= len(greedy)


@pytest.mark.parametrize("name", SCHEMAS)
def test_the_search_plans_the_shortest_answer_within_its_limit(engine, name):
    schema, shortest, _ = SCHEMAS[name]
    grammar = engine.compile(ConstraintSpec.json_schema(schema))
    paths = completer(grammar.vocabulary, json=True)
    matcher = Matcher(grammar.matcher(), grammar.vocabulary)
    assert paths.greedy(matcher, paths.start(), GEN_LENGTH - 1) is None
    plan = paths.search(matcher, paths.start(), len(shortest))
    assert plan is not None and len(plan) <= len(shortest)
    text = b"".join(grammar.vocabulary.tokens[t] for t in plan).decode()
    jsonschema.validate(json.loads(text), schema)
    assert matcher.try_consume_tokens(plan) == len(plan) and matcher.is_accepting()


@pytest.mark.parametrize(("decoder", "temperature", "block"), [
    ("threshold", 0.0, 8), ("fixed", 0.0, 40), ("threshold", 1.5, 8)])
def test_open_objects_stop_where_only_their_shortest_answer_fits(engine, decoder,
                                                                 temperature, block):
    config = GenerationConfig(gen_length=GEN_LENGTH, block_length=block, steps=GEN_LENGTH,
                              decoder=decoder, threshold=0.5, temperature=temperature)
    schemas = [schema for schema, _, _ in SCHEMAS.values()]
    specs = [ConstraintSpec.json_schema(s) for s in schemas]
    results = engine.generate(asked(["json please"] * len(schemas),
                                    seeds=list(range(len(schemas))), constraints=specs), config)
    for result, schema in zip(results, schemas, strict=True):
        assert result.finish_reason == "stop", (schema, result.text)
        jsonschema.validate(json.loads(result.text), schema,
                            format_checker=jsonschema.FormatChecker())
