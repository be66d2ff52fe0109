"""dinfer_engine/constraints/schema.py: every JSON Schema keyword enforced exactly (llguidance's
matcher, fed a value's JSON byte by byte, accepts it exactly when jsonschema with format
checking validates it, over each schema's examples and a pool of other values), refused
naming itself and where it is, or ignored as validators ignore it."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import llguidance
import pytest

from dinfer_engine.constraints import schema as schema_module
from dinfer_engine.constraints import spec as spec_module
from dinfer_engine.constraints.schema import check_schema, prepare_schema
from dinfer_engine.constraints.spec import MAX_SOURCE_CHARS, ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintError

EOS = 256
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "jsonschemabench"


class _Bytes:
    """A byte-level vocabulary for llguidance: token i spells byte i, 256 stops."""

    eos_token_id, bos_token_id = EOS, None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [EOS]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode())


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def matcher_accepts(prepared: dict[str, Any], value: Any) -> bool:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        prepared, defaults={"whitespace_flexible": False})
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(list(text(value).encode())) and matcher.is_accepting()


def validates(schema: dict[str, Any], value: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)


def format_checked(schema: dict[str, Any]) -> bool:
    """Whether jsonschema here checks the schema's format (date-time needs a package
    this environment lacks; the matcher is checked against RFC 3339 all the same)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return schema.get("format") in cls.FORMAT_CHECKER.checkers


# values every schema is also tried on: whatever the matcher accepts must validate
POOL: list[Any] = [None, True, False, 0, 1, -1, 2, 3, 5, 1.5, 0.25, 65535, 65536, "", "a",
                   "ab", "abc", "2023-02-29", "2024-02-29", [], [1], [1, 1], [1, 2],
                   ["a", "b"], ["a", "a"], {}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2},
                   {"a": "x", "b": "y"}, {"a": 1, "c": 1}, {"x-1": 1}]

D4 = "http://json-schema.org/draft-04/schema#"
# (name, schema, values it must accept, values it must reject): in property order, as
# llguidance writes properties in the schema's order
ENFORCED: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    ("integer bounds", {"type": "integer", "minimum": 0, "maximum": 65535},
     [0, 1, 65535], [-1, 65536, 1.5, "1"]),
    ("number bounds", {"type": "number", "minimum": -1.5, "maximum": 2.25},
     [-1.5, 0, 2.25, 1.75], [-2, 2.5, 3]),
    ("exclusive bounds", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
     [0.5, 0.25], [0, 1, -1, 2]),
    ("draft-04 exclusive bounds", {"$schema": D4, "type": "integer", "minimum": 0,
                                   "exclusiveMinimum": True, "maximum": 3,
                                   "exclusiveMaximum": True}, [1, 2], [0, 3, -1, 4]),
    ("draft-04 exclusive false", {"$schema": D4, "type": "integer", "minimum": 0,
                                  "exclusiveMinimum": False}, [0, 5], [-1]),
    ("multipleOf integer", {"type": "integer", "multipleOf": 3}, [0, 3, -3, 9], [1, 2, 4]),
    ("multipleOf number", {"type": "number", "multipleOf": 0.25}, [0.25, 1.25, 2], [0.1, 1.3]),
    ("min/maxProperties", {"type": "object", "additionalProperties": {"type": "integer"},
                           "minProperties": 1, "maxProperties": 2},
     [{"a": 1}, {"a": 1, "b": 2}], [{}, {"a": 1, "b": 2, "c": 3}, {"a": "x"}]),
    ("patternProperties", {"type": "object", "patternProperties": {
        "^a": {"type": "integer"}, "^b": {"type": "string"}}, "additionalProperties": False},
     [{"a": 1}, {"b": "y"}, {}], [{"a": "x"}, {"b": 1}, {"c": 1}]),
    ("additionalItems", {"$schema": D4, "type": "array", "items": [{"type": "string"}],
                         "additionalItems": {"type": "integer"}},
     [["a"], ["a", 1, 2], []], [[1], ["a", "b"]]),
    ("items list", {"$schema": D4, "type": "array", "items": [{"type": "integer"}]},
     [[1], [1, "x", None]], [["x"]]),
    ("dependencies, names", {"$schema": D4, "type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "dependencies": {"a": ["b"]}},
     [{"a": 1, "b": 2}, {"b": 1}, {}], [{"a": 1}]),
    ("dependencies, schema", {"$schema": D4, "type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}},
        "dependencies": {"a": {"required": ["b"], "properties": {"b": {"minimum": 5}}}}},
     [{"a": 1, "b": 5}, {"b": 1}], [{"a": 1}, {"a": 1, "b": 2}]),
    ("dependentRequired", {"type": "object", "properties": {"a": {}, "b": {}},
                           "dependentRequired": {"a": ["b"]}},
     [{"a": 1, "b": 2}, {"b": 1}, {}], [{"a": 1}]),
    ("dependentSchemas", {"type": "object", "properties": {"a": {}, "b": {}},
                          "dependentSchemas": {"a": {"required": ["b"]}}},
     [{"a": 1, "b": 2}, {}], [{"a": 1}]),
    ("not required", {"type": "object", "properties": {"a": {}, "b": {}},
                      "not": {"required": ["a", "b"]}},
     [{"a": 1}, {"b": 1}, {}], [{"a": 1, "b": 2}]),
    ("not required, no type", {"not": {"required": ["a"]}}, [{"b": 1}, {}],
     [{"a": 1}, 1, "a", None]),
    ("not of annotations", {"properties": {"a": {"not": {"description": "d"}}}},
     [{}], [{"a": 1}, {"a": None}]),
    ("not type", {"not": {"type": ["string", "null"]}}, [1, 1.5, [], {}, True], ["a", None]),
    ("not $ref", {"$defs": {"s": {"type": "string"}}, "not": {"$ref": "#/$defs/s"}},
     [1, None], ["a"]),
    ("uniqueItems false", {"type": "array", "items": {"type": "integer"},
                           "uniqueItems": False}, [[1, 1], []], [["a"]]),
    ("uniqueItems of one item", {"type": "array", "uniqueItems": True, "maxItems": 1},
     [[], [1]], [[1, 2]]),
    ("oneOf by type", {"oneOf": [{"type": "string"}, {"type": "integer"}]},
     ["a", 1], [None, 1.5]),
    ("oneOf by discriminator $refs", {"definitions": {
        "cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "a": {}},
                "required": ["kind"]},
        "dog": {"type": "object", "properties": {"kind": {"enum": ["dog"]}, "b": {}},
                "required": ["kind"]}},
        "oneOf": [{"$ref": "#/definitions/cat"}, {"$ref": "#/definitions/dog"}]},
     [{"kind": "cat"}, {"kind": "dog", "b": 1}], [{"kind": "cow"}, {}]),
    ("oneOf of required lists", {"type": "object", "properties": {"a": {}, "b": {}},
                                 "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": 1}], [{"a": 1, "b": 2}, {}]),
    ("format date", {"type": "string", "format": "date"},
     ["2024-02-29", "2000-02-29", "2023-12-31"],
     ["2023-02-29", "1900-02-29", "2023-04-31", "0000-01-01", "2023-1-01"]),
    ("format date-time", {"type": "string", "format": "date-time"},
     ["2024-02-29T12:00:00Z", "2023-01-01T00:00:00.5+01:00"],
     ["2023-02-29T12:00:00Z", "2023-01-01 00:00:00Z", "2023-01-01T00:00:00"]),
    ("format ipv4 and email", {"type": "object", "properties": {
        "ip": {"type": "string", "format": "ipv4"}, "mail": {"type": "string",
                                                             "format": "email"}}},
     [{"ip": "10.0.0.1", "mail": "a@b.co"}], [{"ip": "256.0.0.1"}, {"mail": "ab"}]),
    ("$ref through ids and anchors", {
        "$id": "https://example.com/root.json", "type": "object", "properties": {
            "a": {"$ref": "https://example.com/root.json#/$defs/n"},
            "b": {"$ref": "#name"}, "c": {"$ref": "item.json"}},
        "$defs": {"n": {"type": "integer"}, "s": {"$anchor": "name", "type": "string"},
                  "i": {"$id": "item.json", "type": "boolean"}}},
     [{"a": 1, "b": "x", "c": True}], [{"a": "x"}, {"b": 1}, {"c": 1}]),
    ("draft-04 $ref siblings ignored", {"$schema": D4, "definitions": {
        "n": {"type": "integer"}}, "$ref": "#/definitions/n", "type": "string"},
     [1], ["a"]),
    ("recursion", {"type": "object", "properties": {"v": {"type": "integer"},
                                                    "next": {"$ref": "#"}},
                   "required": ["v"], "additionalProperties": False},
     [{"v": 1}, {"v": 1, "next": {"v": 2}}], [{"v": 1, "next": {}}, {}]),
]


@pytest.mark.parametrize("name,schema,good,bad", ENFORCED, ids=[c[0] for c in ENFORCED])
def test_enforced_keywords_accept_exactly_what_validates(name, schema, good, bad):
    prepared = check_schema(schema)
    for value in good:
        assert validates(schema, value), value
        assert matcher_accepts(prepared, value), value
    for value in bad:
        assert not matcher_accepts(prepared, value), value
        assert not validates(schema, value) or not format_checked(schema), value
    for value in POOL:  # never weakened: whatever the matcher takes validates
        if matcher_accepts(prepared, value):
            assert validates(schema, value), value


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"type": "object", "properties": {"age": {"type": "array", "uniqueItems": True}}},
     "schema.properties.age: keyword 'uniqueItems' is not supported"),
    ({"type": "array", "contains": {"type": "integer"}},
     "schema: keyword 'contains' is not supported"),
    ({"type": "object", "propertyNames": {"maxLength": 3}},
     "schema: keyword 'propertyNames' is not supported"),
    ({"if": {"type": "string"}, "then": {"minLength": 1}},
     "schema: keyword 'then' is not supported"),
    ({"type": "object", "unevaluatedProperties": False},
     "schema: keyword 'unevaluatedProperties' is not supported"),
    ({"items": {"not": {"pattern": "^a"}}}, "schema.items: keyword 'not' is not supported"),
    ({"not": {"type": "integer"}}, "schema: keyword 'not' is not supported"),
    ({"type": "string", "format": ["date"]}, "schema.format must be a string"),
    ({"properties": {"r": {"type": "string", "format": "regex"}}},
     "schema.properties.r.format: format 'regex' is not supported"),
    ({"properties": {"v": {"oneOf": [{"type": "string"}, {"maxLength": 3}]}}},
     "schema.properties.v: keyword 'oneOf' is not supported where its branches cannot be"),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]},
     "schema: keyword 'oneOf' is not supported"),
    ({"oneOf": [{"const": 1}, {"enum": [1.0, 2]}]}, "schema: keyword 'oneOf' is not supported"),
    ({"type": "object", "properties": {"a": {}}, "minProperties": 1},
     "schema: keyword 'minProperties' is not supported unless every property"),
    ({"type": "object", "properties": {"a": {}}, "maxProperties": 3},
     "schema: keyword 'maxProperties' is not supported unless every property"),
    ({"type": "object", "patternProperties": {"^a": {}, "b": {}}},
     "schema: keyword 'patternProperties' is not supported where two patterns"),
    ({"properties": {"a": {"$ref": "other.json#/x"}}},
     "schema.properties.a.$ref: $ref 'other.json#/x' points outside the schema"),
    ({"type": "object", "dependencies": {str(i): ["x"] for i in range(7)}},
     "schema.dependencies: keyword 'dependencies' is not supported with more than 6"),
    ({"properties": {"p": {"type": "string", "pattern": "^(?=a)"}}},
     "schema.properties.p.pattern: pattern '^(?=a)' cannot be enforced"),
]


@pytest.mark.parametrize("schema,message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_refused_keywords_name_themselves_and_where(schema, message):
    with pytest.raises(ConstraintError) as caught:
        check_schema(schema)
    assert message in str(caught.value)


def test_keys_that_constrain_nothing_are_stripped():
    schema = {"$schema": D4, "id": "http://example.com/s", "type": "object",
              "self": {"vendor": "com.acme", "name": "s", "format": "jsonschema"},
              "x-order": 3, "_format": "x", "example": {}, "propertyOrder": ["a"],
              "readonly": True, "title": "t", "description": "d", "default": {},
              "definitions": {"unused": {"uniqueItems": True}},
              "properties": {"a": {"type": "integer", "format": "int32", "examples": [1],
                                   "deprecated": True}},
              "if": {"required": ["a"]}, "then": {"required": ["b"]}}  # draft-04: no if
    assert prepare_schema(schema) == {"type": "object",
                                      "properties": {"a": {"type": "integer"}}}
    assert matcher_accepts(check_schema(schema), {"a": 1})


def test_openai_strict_subset_is_accepted_whole():
    schema = {"type": "object", "additionalProperties": False,
              "required": ["id", "price", "tags", "when", "choice", "ratio", "code", "kid"],
              "properties": {
                  "id": {"type": "integer", "minimum": 0, "maximum": 65535},
                  "price": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
                  "tags": {"type": "array", "items": {"type": "string"},
                           "minItems": 1, "maxItems": 3},
                  "when": {"type": "string", "format": "date-time"},
                  "choice": {"anyOf": [{"type": "string", "enum": ["a", "b"]},
                                       {"type": "null"}]},
                  "ratio": {"type": "number", "exclusiveMaximum": 1, "minimum": 0},
                  "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                  "kid": {"$ref": "#/$defs/kid"}},
              "$defs": {"kid": {"type": "object", "additionalProperties": False,
                                "properties": {"name": {"type": "string"}},
                                "required": ["name"]}}}
    prepared = check_schema(schema)
    value = {"id": 80, "price": 9.99, "tags": ["x"], "when": "2024-02-29T10:00:00Z",
             "choice": None, "ratio": 0.5, "code": "ABC", "kid": {"name": "k"}}
    assert validates(schema, value) and matcher_accepts(prepared, value)
    assert not matcher_accepts(prepared, {**value, "price": 0})


def test_the_spec_check_uses_it_and_limits_by_size():
    ConstraintSpec.json_schema({"type": "integer", "minimum": 0}).grammar()
    refused = ConstraintSpec.json_schema({"type": "array", "uniqueItems": True})
    for _ in range(2):  # the second time from the remembered verdict
        with pytest.raises(ConstraintError, match="keyword 'uniqueItems'"):
            refused.grammar()
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description":
                                                       "x" * 100} for i in range(400)}}
    ConstraintSpec.json_schema(big).grammar()  # 40,000+ characters, a small grammar
    huge = {"description": "x" * MAX_SOURCE_CHARS}
    with pytest.raises(ConstraintError, match="characters long; the limit is"):
        ConstraintSpec.json_schema(huge).grammar()


def test_a_schema_grammar_is_built_once_and_is_the_one_matched(monkeypatch):
    """The spec's grammar is the build that checked it (the answers' whitespace options,
    the engine's parser limits), not a second one."""
    builds = []

    def counted(*args: Any) -> tuple[str, str]:
        builds.append(args)
        return built(*args)

    built = schema_module._built
    monkeypatch.setattr(schema_module, "_built", counted)
    spec_module._grammar.cache_clear()
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}
    grammar = ConstraintSpec.json_schema(schema).grammar()
    assert len(builds) == 1
    assert grammar == llguidance.LLMatcher.grammar_from_json_schema(
        prepare_schema(schema), defaults=spec_module.JSON_OPTIONS)


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": -5, "maximum": 12, "multipleOf": 3},
    {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 0.5},
    {"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 9},
])
def test_brute_force_every_short_text(schema):
    """Every text of up to 3 characters over a number's alphabet: the matcher accepts it
    only if it is JSON that validates, and accepts every integer written plainly that
    validates."""
    prepared = check_schema(schema)
    alphabet = "0123456789-.e"
    texts = [""] + list(alphabet)
    texts += [a + b for a in alphabet for b in alphabet]
    texts += [t + c for t in texts if len(t) == 2 for c in alphabet]
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        prepared, defaults={"whitespace_flexible": False})
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, log_level=0)
    for candidate in texts:
        tokens = list(candidate.encode())
        accepted = matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()
        assert matcher.reset() and not matcher.is_error()
        try:
            value = json.loads(candidate)
        except ValueError:
            assert not accepted, candidate
            continue
        assert not accepted or validates(schema, value), candidate
        if isinstance(value, int) and str(value) == candidate and validates(schema, value):
            assert accepted, candidate


def _walk(prepared: dict[str, Any], rng: random.Random, limit: int = 2000) -> bytes | None:
    """A random complete text the matcher allows (closing sooner as it grows), or None."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        prepared, defaults={"whitespace_flexible": False})
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, log_level=0)
    out = bytearray()
    while len(out) < limit:
        mask = matcher.compute_bitmask()
        allowed = [i for i in range(EOS + 1) if mask[i // 8] >> (i % 8) & 1]
        if EOS in allowed and (len(out) > 40 or rng.random() < 0.3):
            return bytes(out)
        choices = [a for a in allowed if a != EOS]
        if not choices:
            return bytes(out) if EOS in allowed else None
        closing = [a for a in choices if a in b'}]"0123456789']
        if len(out) > 200 and closing and rng.random() < 0.7:
            choices = closing
        token = rng.choice(choices)
        assert matcher.consume_token(token), matcher.get_error()
        out.append(token)
    return None


def _exact_multiple(error: jsonschema.ValidationError) -> bool:
    """jsonschema's float division rejects some exact decimal multiples (75759206.99 of
    0.01); decimal arithmetic settles them."""
    return error.validator == "multipleOf" and (
        Decimal(str(error.instance)) % Decimal(str(error.validator_value)) == 0)


@pytest.mark.parametrize("dataset", sorted(p.stem for p in BENCH.glob("*.jsonl")))
def test_random_texts_of_real_schemas_validate(dataset):
    """Benchmark schemas (the first 6 of each dataset) that check_schema accepts: random
    complete texts llguidance's matcher allows all validate with jsonschema."""
    rng = random.Random(dataset)
    walked = 0
    for line in (BENCH / f"{dataset}.jsonl").read_text().splitlines()[:6]:
        schema = json.loads(line)["schema"]
        try:
            prepared = check_schema(schema)
        except ConstraintError:
            continue
        cls = jsonschema.validators.validator_for(schema,
                                                  default=jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for _ in range(2):
            written = _walk(prepared, rng)
            if written is not None:
                walked += 1
                errors = [e for e in validator.iter_errors(json.loads(written))
                          if not _exact_multiple(e)]
                assert not errors, (written[:300], errors[0].message[:300])
    assert walked
