"""What a function-calling answer may be, as one constraint spec (docs/tools.md, ADR 061).

A call is written as the JSON object `{"name": NAME, "arguments": {...}}`, its
`arguments` valid for that function's `parameters` schema; several calls (when
`parallel_tool_calls` allows them) as a JSON array of such objects, one call alone also
as the bare object. `tool_choice` decides the spec:

- "required", or one named function: a JSON schema of the call(s) (kind `json_schema`),
  so the witness of structured outputs makes every committed token completable into
  valid calls (ADR 029/036/049);
- "auto": a Lark grammar (kind `lark`) of text or call(s): the call(s) through `%json`
  with the same schema, prepared as structured outputs prepare one; text is anything
  whose first non-space character is neither `{` nor `[`, so an answer is read back as
  calls exactly when it starts like one (formats/function_calling/tool_calls.py);
- "none": no spec (the answer is text).

Each function's `parameters` is nested in the call's schema under
`$defs.call.anyOf[i].properties.arguments`; its local `$ref`s (`#...`) are rebased there.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from dinfer_engine.constraints.schema import schema_grammar
from dinfer_engine.constraints.spec import JSON_OPTIONS, ConstraintSpec, parser_limits
from dinfer_engine.constraints.spec_errors import ConstraintError

# a function without `parameters` takes none (OpenAI: an empty parameter list)
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {},
                                 "additionalProperties": False}
# values that are data, not schemas: a `$ref` string inside them is not a reference
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})
# keywords whose value maps names (any name, "const" too) to schemas
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                         "dependentSchemas", "dependencies"})
# text: empty, blank, or starting (after blanks) with anything but a call's `{` or `[`
TEXT_LEXEME = r"/[ \t\r\n]*([^ \t\r\n{\[][\s\S]*)?/"


def calls_schema(functions: list[dict[str, Any]], parallel: bool,
                 max_calls: int | None = None) -> dict[str, Any]:
    """The JSON schema of an answer that is a call of one of `functions` (each {"name",
    "parameters"?}), or with `parallel` also a non-empty array of calls (at most
    `max_calls`)."""
    branches = []
    for index, function in enumerate(functions):
        parameters = function.get("parameters") or NO_PARAMETERS
        where = f"#/$defs/call/anyOf/{index}/properties/arguments"
        branches.append({"type": "object", "properties": {
            "name": {"const": function["name"]}, "arguments": _rebased(parameters, where)},
            "required": ["name", "arguments"], "additionalProperties": False})
    one: dict[str, Any] = {"$ref": "#/$defs/call"}
    schema: dict[str, Any] = {"$defs": {"call": {"anyOf": branches}}}
    if not parallel or max_calls == 1:
        return schema | one
    array: dict[str, Any] = {"type": "array", "items": one, "minItems": 1}
    if max_calls is not None:
        array["maxItems"] = max_calls
    return schema | {"anyOf": [one, array]}


def tool_spec(functions: list[dict[str, Any]], choice: Any, parallel: bool,
              max_calls: int | None = None) -> ConstraintSpec | None:
    """The constraint `tool_choice` asks for ("none", "auto", "required" or {"name"});
    ConstraintError naming the keyword or limit when a function's schema cannot be
    enforced."""
    if choice == "none":
        return None
    if isinstance(choice, dict):
        functions = [f for f in functions if f["name"] == choice["name"]]
    schema = calls_schema(functions, parallel, max_calls)
    if choice != "auto":
        return ConstraintSpec.json_schema(schema)
    return ConstraintSpec.lark(_text_or_calls(json.dumps(schema, ensure_ascii=False)))


# calls' schemas as JSON text, up to MAX_SOURCE_CHARS each: a few lines' tools at a time
@lru_cache(maxsize=16)
def _text_or_calls(schema: str) -> str:
    """The Lark grammar of text or the calls of `schema` (its JSON text), prepared as
    structured outputs prepare a schema; cached, as a file's lines mostly share tools
    (preparing costs milliseconds, a million lines' worth of them would be half an
    hour)."""
    prepared, _ = schema_grammar(json.loads(schema), JSON_OPTIONS, parser_limits())
    embedded = json.dumps(prepared | {"x-guidance": JSON_OPTIONS}, ensure_ascii=False)
    return f"start: calls | TEXT\ncalls: %json {embedded}\nTEXT: {TEXT_LEXEME}\n"


def _rebased(schema: Any, where: str) -> Any:
    """`schema` with each local `$ref` ("#", "#/..."; not data under DATA_KEYWORDS)
    pointing into the call's schema at `where`."""
    if isinstance(schema, list):
        return [_rebased(item, where) for item in schema]
    if not isinstance(schema, dict):
        return schema
    rebased: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            if value not in ("#", "#/") and not value.startswith("#/"):
                raise ConstraintError(f"$ref {value!r}: a function's parameters may refer "
                                      "to their own parts by JSON pointer (#/...), not by "
                                      "anchor")
            rebased[key] = where + value[1:].rstrip("/") if value != "#" else where
        elif key in DATA_KEYWORDS:
            rebased[key] = value
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            rebased[key] = {name: _rebased(part, where) for name, part in value.items()}
        else:
            rebased[key] = _rebased(value, where)
    return rebased
