"""Structured outputs as request bodies ask for them, mapped to one constraint spec
(dinfer_engine/constraints/spec.py), stored with the request's parameters as `structured`:
{"kind", "source"}.

- OpenAI's `response_format`: {"type": "text"} (no constraint), {"type": "json_object"}
  (any JSON object), {"type": "json_schema", "json_schema": {"name", "schema",
  "strict"}}. `/v1/responses` lines carry the same in `text.format`: map it onto this
  shape and call `response_format_spec`.
- vLLM's `structured_outputs`: exactly one of {"json": schema}, {"regex": pattern},
  {"choice": [strings]}.
- The command line's --json-schema FILE, --regex, --choice A,B: `option_spec`.

Each spec is checked here (keywords, sizes and llguidance's validation of its grammar:
ConstraintSpec.grammar, milliseconds, in-process), so a line that cannot be honoured
fails at submit, naming the field and the keyword or limit."""

from __future__ import annotations

import json
from typing import Any

from dinfer_batch.formats.limits import InvalidParam, shown
from dinfer_engine.constraints.spec import ConstraintError, ConstraintSpec

# {"type": "json_object"}: any JSON object (llguidance's grammar nests it to any depth)
JSON_OBJECT: dict[str, Any] = {"type": "object"}
RESPONSE_TYPES = ("text", "json_object", "json_schema")
STRUCTURED_KEYS = ("json", "regex", "choice")


def body_spec(body: dict[str, Any]) -> dict[str, str] | None:
    """The constraint a body's `response_format` or `structured_outputs` asks for (stored
    form), or None."""
    asked = [name for name in ("response_format", "structured_outputs")
             if body.get(name) is not None]
    if len(asked) > 1:
        raise InvalidParam("response_format and structured_outputs are both set; use one")
    if not asked:
        return None
    name = asked[0]
    value = body[name]
    if name == "structured_outputs":
        asked_for = structured_outputs_spec(value)  # a dict with one of STRUCTURED_KEYS
        key = next(k for k in STRUCTURED_KEYS if value.get(k) is not None)
        return checked(asked_for, f"{name}.{key}")
    spec = response_format_spec(value)
    return None if spec is None else checked(spec, f"{name}.{value['type']}")


def response_format_spec(value: Any, field: str = "response_format") -> ConstraintSpec | None:
    """OpenAI's response_format (None for {"type": "text"})."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in RESPONSE_TYPES:
        raise InvalidParam(f"{field}.type must be one of {', '.join(RESPONSE_TYPES)}; got "
                           f"{shown(kind if isinstance(value, dict) else value)}")
    if kind == "text":
        return None
    if kind == "json_object":
        return ConstraintSpec.json_schema(JSON_OBJECT)
    described = value.get("json_schema")
    if not isinstance(described, dict):
        raise InvalidParam(f'{field}.json_schema must be an object {{"name", "schema", '
                           f'"strict"}}, got {shown(described)}')
    name, strict = described.get("name"), described.get("strict")
    if name is not None and not isinstance(name, str):
        raise InvalidParam(f"{field}.json_schema.name must be a string, got {shown(name)}")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidParam(f"{field}.json_schema.strict must be true or false, got "
                           f"{shown(strict)}")
    schema = described.get("schema", JSON_OBJECT)  # OpenAI: a missing schema: any object
    return _spec(lambda: ConstraintSpec.json_schema(schema), f"{field}.json_schema.schema")


def structured_outputs_spec(value: Any) -> ConstraintSpec:
    """vLLM's structured_outputs: {"json": schema (or its JSON text)} | {"regex": ...} |
    {"choice": [...]}."""
    field = "structured_outputs"
    given = [k for k, v in value.items() if v is not None] if isinstance(value, dict) else []
    if not isinstance(value, dict) or len(given) != 1 or given[0] not in STRUCTURED_KEYS:
        raise InvalidParam(f"{field} must hold exactly one of {', '.join(STRUCTURED_KEYS)} "
                           f"(got {shown(given if isinstance(value, dict) else value)})")
    key = given[0]
    raw = value[key]
    if key == "json":
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise InvalidParam(f"{field}.json is not valid JSON: {exc}") from exc
        return _spec(lambda: ConstraintSpec.json_schema(raw), f"{field}.json")
    if key == "regex":
        return _spec(lambda: ConstraintSpec.regex(raw), f"{field}.regex")
    return _spec(lambda: ConstraintSpec.choice(raw), f"{field}.choice")


def option_spec(json_schema: Any = None, regex: str | None = None,
                choice: str | None = None) -> dict[str, str] | None:
    """The command line's --json-schema (the file's schema, already read), --regex or
    --choice A,B (stored form), or None."""
    given = [name for name, v in (("--json-schema", json_schema), ("--regex", regex),
                                  ("--choice", choice)) if v is not None]
    if len(given) > 1:
        raise InvalidParam(f"{' and '.join(given)} are both set; use one")
    if json_schema is not None:
        spec = _spec(lambda: ConstraintSpec.json_schema(json_schema), "--json-schema")
    elif regex is not None:
        spec = _spec(lambda: ConstraintSpec.regex(regex), "--regex")
    elif choice is not None:
        spec = _spec(lambda: ConstraintSpec.choice([c.strip() for c in choice.split(",")]),
                     "--choice")
    else:
        return None
    return checked(spec, given[0])


def check_structured(name: str, value: Any) -> dict[str, str]:
    """The stored form, checked again (a job's defaults and template lines come here)."""
    if not isinstance(value, dict):
        raise InvalidParam(f"{name} must be a constraint object, got {shown(value)}")
    return checked(_spec(lambda: ConstraintSpec.from_dict(value), name), name)


def checked(spec: ConstraintSpec, field: str) -> dict[str, str]:
    """The spec's stored form, once its grammar is valid and within limits."""
    _spec(spec.grammar, field)
    return spec.as_dict()


def _spec(make: Any, field: str) -> Any:
    try:
        return make()
    except ConstraintError as exc:
        raise InvalidParam(f"{field}: {exc}") from exc
