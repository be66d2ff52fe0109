"""Structured outputs in the engine (dinfer_engine/constraints/) on random-weight checkpoints
whose unconstrained output is noise: every answer that ends with a stop token validates
against its schema (jsonschema) or matches its regex / choice, with every decoder, cache,
smoothing, sampling and family; a mixed batch gives each row what it gets alone; a
canvas too short ends with finish_reason "length"."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.engine_requests import asked
from tests.json_models import write_json_model

# objects closed as OpenAI's strict mode has them: a random model would otherwise add
# properties until the canvas ends ("length", valid so far)
SCHEMAS: dict[str, dict[str, Any]] = {
    "nested": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 6}, "id": {"type": "integer"}},
            "required": ["name", "id"], "additionalProperties": False},
        "ok": {"type": "boolean"}}, "required": ["user", "ok"], "additionalProperties": False},
    "array": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                 "minItems": 2, "maxItems": 3}}, "required": ["tags"],
        "additionalProperties": False},
    "enum": {"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue"]}, "size": {"type": "integer"}},
        "required": ["color", "size"], "additionalProperties": False},
    "numbers": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
    "pattern": {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[a-c]{2}[0-9]$"}}, "required": ["code"],
        "additionalProperties": False},
    "optional": {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 4}, "b": {"type": "integer"},
        "c": {"type": "null"}}, "required": ["a"], "additionalProperties": False},
    "format": {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}}, "required": ["id"],
        "additionalProperties": False},
}
REGEX = r"[a-f]{3}-[0-9]{2}"
CHOICES = ["yes", "no", "maybe so"]
SPECS: list[ConstraintSpec | None] = [
    *(ConstraintSpec.json_schema(s) for s in SCHEMAS.values()),
    ConstraintSpec.regex(REGEX), ConstraintSpec.choice(CHOICES), None]
PROMPTS = ["give me json", "x", "a longer prompt about things", "q", "tags?", "hi there",
           "pick", "say", "when?", "free text"]
DECODERS = ("fixed", "threshold", "hierarchical", "credit")
CACHES = ("none", "prefix", "dual", "vicinity")


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("json_models")
    return {family: Engine.from_pretrained(write_json_model(root / family, family))
            for family in ("llada", "llada_moe", "llada2")}


def config(**overrides: Any) -> GenerationConfig:
    fields: dict[str, Any] = dict(gen_length=64, block_length=16, steps=32,
                                  decoder="threshold", threshold=0.5, max_batch_size=16)
    return GenerationConfig(**(fields | overrides))


def valid(spec: ConstraintSpec, text: str) -> bool:
    if spec.kind == "json_schema":
        try:
            jsonschema.validate(json.loads(text), json.loads(spec.source),
                                format_checker=jsonschema.FormatChecker())
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    if spec.kind == "regex":
        return re.fullmatch(spec.source, text) is not None
    return text in json.loads(spec.source)


def check_all_valid(results: list[Any], specs: list[ConstraintSpec | None]) -> None:
    """Every constrained row ends with a stop token (the canvas has room) and validates;
    the free row is noise that validates against none of the schemas."""
    for result, spec in zip(results, specs, strict=True):
        if spec is None:
            assert not any(valid(s, result.text) for s in SPECS if s is not None)
            continue
        assert result.finish_reason == "stop", (spec.kind, result.text)
        assert valid(spec, result.text), (spec.source, result.text)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("cache", CACHES)
def test_every_answer_validates_with_every_decoder_and_cache(engines, decoder, cache):
    results = engines["llada"].generate(asked(PROMPTS, constraints=SPECS), config(decoder=decoder,
                                                                                  cache=cache))
    check_all_valid(results, SPECS)


@pytest.mark.parametrize("family", ["llada_moe", "llada2"])
def test_every_answer_validates_in_the_moe_and_block_diffusion_families(engines, family):
    # LLaDA2's blocks lie on an absolute grid: most answers start inside a block of prompt
    results = engines[family].generate(asked(PROMPTS, constraints=SPECS), config(block_length=8))
    check_all_valid(results, SPECS)


def test_sampled_answers_are_valid_seeded_and_differ_between_seeds(engines):
    engine = engines["llada"]
    specs = [s for s in SPECS[:3] for _ in range(3)]
    seeds = [10, 11, 12] * 3
    # the random model's logits lead by 6 or more: a high temperature lets seeds differ
    cfg = config(temperature=2.0, smoothing=True)
    first = engine.generate(asked(["give me json"] * 9, seeds=seeds, constraints=specs), cfg)
    again = engine.generate(asked(["give me json"] * 9, seeds=seeds, constraints=specs), cfg)
    check_all_valid(first, specs)
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert len({r.text for r in first[:3]}) > 1


@pytest.mark.parametrize(("family", "decoder", "cache", "temperature"), [
    ("llada", "threshold", "dual", 0.0), ("llada", "credit", "none", 0.0),
    ("llada", "fixed", "vicinity", 0.8), ("llada_moe", "hierarchical", "prefix", 0.0),
    ("llada2", "threshold", "none", 0.8)])
def test_a_mixed_batch_gives_each_row_what_it_gets_alone(engines, family, decoder, cache,
                                                          temperature):
    engine = engines[family]
    cfg = config(decoder=decoder, cache=cache, temperature=temperature, block_length=8)
    seeds = list(range(len(PROMPTS)))
    together = engine.generate(asked(PROMPTS, seeds=seeds, constraints=SPECS), cfg)
    for i, (prompt, spec) in enumerate(zip(PROMPTS, SPECS, strict=True)):
        alone = engine.generate(asked([prompt], seeds=[seeds[i]], constraints=[spec]), cfg)[0]
        assert alone.token_ids == together[i].token_ids, (i, alone.text, together[i].text)


def test_a_canvas_too_short_ends_with_length_never_an_invalid_stop(engines):
    engine = engines["llada"]
    specs = [ConstraintSpec.json_schema(SCHEMAS["nested"]), ConstraintSpec.regex(REGEX)]
    results = engine.generate(asked(["x", "y"], constraints=specs), config(gen_length=4,
                                                                           block_length=4))
    for result in results:
        assert result.finish_reason == "length"
        assert len(result.token_ids) == 4 and engine.eos_id not in result.token_ids
    # what was written is the start of a valid answer
    assert '{"user":{"name":"'.startswith(results[0].text.replace(" ", ""))
    assert re.fullmatch(r"[a-f]{3}-", results[1].text)


def test_one_constraint_that_cannot_compile_names_its_prompt(engines):
    with pytest.raises(ValueError, match=r"prompt 1: .*cannot spell"):
        engines["llada"].generate(asked(["a", "b"], constraints=[
            None, ConstraintSpec.regex("[A-Z]+")]), config())


def test_each_distinct_constraint_is_compiled_once(engines):
    engine = engines["llada"]
    spec = ConstraintSpec.regex("[a-c]{4}x")
    before = engine.constraints.compiles
    engine.generate(asked(["a", "b"], constraints=[spec, spec]), config(gen_length=16))
    first = engine.compile(spec)
    engine.generate(asked(["c"], constraints=[spec]), config(gen_length=16))
    assert engine.compile(spec) is first
    assert engine.constraints.compiles == before + 1


def test_checkpoint_tokenizer_is_the_json_one(engines):
    assert Path(engines["llada"].tokenizer.name_or_path).name == "llada"
    assert engines["llada"].tokenizer.decode(engines["llada"].tokenizer('{"a":1}')[
        "input_ids"]) == '{"a":1}'
