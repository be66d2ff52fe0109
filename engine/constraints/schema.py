"""A JSON schema as the grammar engine should see it (placeholder: the keyword check the
constrained decoding has enforced so far; the JSON Schema coverage of issue 37 replaces
this file).

Torch-free: the service checks schemas at submit."""

from __future__ import annotations

import re
from typing import Any

from engine.constraints.spec_errors import ConstraintError

MAX_SCHEMA_DEPTH = 32  # nesting of schema objects within one another

# JSON Schema keywords that are enforced; annotations that never constrain a value are
# accepted too. Anything else fails the request, naming the keyword, rather than being
# silently ignored.
ENFORCED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "minLength", "maxLength", "pattern", "format"})
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id",
                         "$comment", "deprecated", "readOnly", "writeOnly"})
FORMATS = ("date", "date-time", "time", "uuid", "email", "uri")
# keywords whose value holds schemas: one, a list of them, or a name -> schema map
ONE_SCHEMA = ("items", "additionalProperties")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_MAPS = ("properties", "$defs", "definitions")


def prepare_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as llguidance should see it; ConstraintError naming the keyword and
    where it is for one that is refused."""
    _check(schema, "schema", 0)
    return schema


def _check(schema: Any, where: str, depth: int) -> None:
    """Every keyword enforced or a plain annotation, formats known, patterns valid."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ConstraintError(f"{where} must be a JSON schema object")
    if depth > MAX_SCHEMA_DEPTH:
        raise ConstraintError(f"{where}: schemas nest deeper than {MAX_SCHEMA_DEPTH} levels")
    for keyword, value in schema.items():
        if keyword not in ENFORCED and keyword not in ANNOTATIONS:
            raise ConstraintError(f"{where}: keyword {keyword!r} is not supported (supported: "
                                  f"{', '.join(sorted(ENFORCED))})")
        inner = f"{where}.{keyword}"
        if keyword == "format" and value not in FORMATS:
            raise ConstraintError(f"{inner}: format {value!r} is not supported (supported: "
                                  f"{', '.join(FORMATS)})")
        if keyword == "pattern":
            _check_pattern(value, inner)
        if keyword in ONE_SCHEMA and not isinstance(value, bool):
            _check(value, inner, depth + 1)
        elif keyword in SCHEMA_LISTS:
            if not isinstance(value, list):
                raise ConstraintError(f"{inner} must be a list of schemas")
            for i, item in enumerate(value):
                _check(item, f"{inner}[{i}]", depth + 1)
        elif keyword in SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise ConstraintError(f"{inner} must be an object of schemas")
            for name, item in value.items():
                _check(item, f"{inner}.{name}", depth + 1)


def _check_pattern(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str):
        raise ConstraintError(f"{where} must be a string")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConstraintError(f"{where} is not a valid regular expression: {exc}") from exc
