"""Answers close in time (dinfer_engine/constraints/closing.py, the witness's room bound): schemas
with open objects (additionalProperties true by default), arrays of open objects and
patternProperties, on random checkpoints whose model keeps adding keys, end "stop" and
validate (jsonschema with format checking) with every decoder, cache, sampling and
family; and the JSON scan's bound never exceeds what a document still needs."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.closing import START, JsonScan
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.engine_requests import asked
from tests.json_models import NESTED_SCHEMA, write_json_model

SCHEMAS: dict[str, dict[str, Any]] = {
    "nested": NESTED_SCHEMA,
    "array": {"type": "array", "items": {
        "type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]},
        "minItems": 2},
    "pattern": {"type": "object", "patternProperties": {"^x[a-z]*$": {"type": "integer"}},
                "properties": {"name": {"type": "string"}}, "required": ["name"]},
    "pattern_closed": {"type": "object", "patternProperties": {"^[a-c]+$": {"type": "object"}},
                       "additionalProperties": False, "minProperties": 1},
    "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {"c": {"type": "array", "items": {
            "type": "object"}}}, "required": ["c"]}}, "required": ["b"]}},
        "required": ["a"]},
    "object": {"type": "object"},
}
SPECS = [ConstraintSpec.json_schema(s) for s in SCHEMAS.values()]
PROMPTS = ["give me json", "x", "a longer prompt about things", "q", "tags?", "hi there"]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("json_models")
    return {family: Engine.from_pretrained(write_json_model(root / family, family))
            for family in ("llada", "llada_moe", "llada2")}


def check_closed_and_valid(results: list[Any]) -> None:
    for result, spec in zip(results, SPECS, strict=True):
        assert result.finish_reason == "stop", (spec.source, result.text)
        jsonschema.validate(json.loads(result.text), json.loads(spec.source),
                            format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize(("family", "decoder", "cache", "temperature", "block"), [
    ("llada", "threshold", "none", 0.0, 16), ("llada", "fixed", "prefix", 0.0, 16),
    ("llada", "hierarchical", "dual", 1.5, 16), ("llada", "credit", "vicinity", 0.0, 32),
    ("llada", "threshold", "none", 1.5, 64), ("llada_moe", "threshold", "prefix", 0.0, 16),
    ("llada2", "threshold", "none", 0.8, 8)])
def test_open_objects_close_in_time_and_validate(engines, family, decoder, cache,
                                                 temperature, block):
    config = GenerationConfig(gen_length=64, block_length=block, steps=32, decoder=decoder,
                              threshold=0.5, cache=cache, temperature=temperature)
    results = engines[family].generate(asked(PROMPTS, seeds=list(range(len(PROMPTS))),
                                             constraints=SPECS), config)
    check_closed_and_valid(results)


def test_a_row_closes_alone_as_in_a_batch(engines):
    config = GenerationConfig(gen_length=64, block_length=16, steps=32, decoder="threshold",
                              threshold=0.5, temperature=0.8)
    together = engines["llada"].generate(asked(PROMPTS, seeds=[7] * len(PROMPTS),
                                               constraints=SPECS), config)
    for prompt, spec, result in zip(PROMPTS, SPECS, together, strict=True):
        alone = engines["llada"].generate(asked([prompt], seeds=[7], constraints=[spec]), config)
        assert alone[0].token_ids == result.token_ids


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice("osnbl" if depth < 3 else "snb")
    if kind == "o":
        return {rng.choice(["a", "k\"q", "\\", "\u00e9"]) + str(i): random_json(rng, depth + 1)
                for i in range(rng.randint(0, 3))}
    if kind == "l":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "s":
        return rng.choice(["", "x", "a\"b", "tab\t", "\u20ac", "\\u"])
    if kind == "n":
        return rng.choice([0, -7, 3.25, 1e-7, -2.5e30, 12])
    return rng.choice([True, False, None])


def test_the_json_bound_never_exceeds_what_a_document_still_needs():
    rng = random.Random(0)
    for _ in range(300):
        value = random_json(rng)
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5,
                          separators=rng.choice([(",", ":"), (", ", ": ")])).encode()
        for end in range(len(text) + 1):
            state = JsonScan.feed(START, text[:end])
            assert state[1] != "X", (text, end)
            assert JsonScan.bound(state) <= len(text) - end, (text, end, state)
        assert JsonScan.bound(JsonScan.feed(START, text)) == 0
