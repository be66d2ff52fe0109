"""`oneOf` made exact before llguidance sees it (dinfer_engine/constraints/schema.py): where its
branches provably accept no common value it is `anyOf` (the same set of values); where
they are lists of `required` properties it becomes anyOf [these present, one of each
other list absent]. Otherwise it stays `oneOf`, which llguidance enforces only when it
proves the branches disjoint itself, and the schema is refused naming `oneOf`.

The proof is conservative: "disjoint" only when the branches' possible JSON types do not
meet, their const/enum values do not meet, or a property both objects must have has
disjoint schemas in each; `$ref`s are followed through the prepared `$defs`."""

from __future__ import annotations

import json
from typing import Any

KINDS = frozenset({"null", "boolean", "object", "array", "string", "integer", "fraction"})
MAX_PROOF_DEPTH = 8  # nested properties / references a proof may follow


def exact_one_of(branches: list[Any], defs: dict[str, Any]) -> list[Any] | None:
    """anyOf branches that accept exactly what oneOf [branches] does, or None."""
    if all(_disjoint(a, b, defs, 0) for i, a in enumerate(branches)
           for b in branches[i + 1:]):
        return branches
    lists: list[list[str]] = [b["required"] for b in branches if isinstance(b, dict)
                              and list(b) == ["required"] and isinstance(b["required"], list)]
    if len(branches) >= 2 and len(lists) == len(branches):
        return [{"type": "object", "required": mine,
                          "allOf": [_some_absent(other) for j, other in enumerate(lists)
                                   if j != i]} for i, mine in enumerate(lists)]
    return None


def _some_absent(names: list[str]) -> Any:
    """Not all of `names` present (false for none: every object has all of nothing)."""
    return {"anyOf": [{"properties": {name: False}} for name in names]} if names else False


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs.get(ref[len("#/$defs/"):], True)
    return True  # "#": the root; no claim


def _conjuncts(schema: Any, defs: dict[str, Any]) -> list[Any]:
    """Schemas each value of `schema` satisfies: itself without applicators, its $ref's
    target, its allOf's."""
    if not isinstance(schema, dict):
        return [schema]
    plain = {k: v for k, v in schema.items() if k not in ("$ref", "allOf", "$defs")}
    out = [plain]
    if "$ref" in schema:
        out.append(_resolve(schema, defs))
    out.extend(schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else [])
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "fraction", str: "string", list: "array", dict: "object"}[type(value)]


def _kinds(schema: Any, defs: dict[str, Any], depth: int) -> frozenset[str]:
    """A superset of the JSON types `schema` accepts."""
    if schema is False:
        return frozenset()
    if not isinstance(schema, dict) or depth > MAX_PROOF_DEPTH:
        return KINDS
    kinds = KINDS
    declared = schema.get("type")
    if declared is not None:
        names = {declared} if isinstance(declared, str) else set(declared)
        if "number" in names:
            names |= {"integer", "fraction"}
        kinds &= names
    values = _values(schema)
    if values is not None:
        kinds &= {_kind(json.loads(v)) for v in values}
    for branches in (schema.get("anyOf"), schema.get("oneOf")):
        if isinstance(branches, list):
            kinds &= frozenset().union(*(_kinds(b, defs, depth + 1) for b in branches))
    for part in _conjuncts(schema, defs)[1:]:
        kinds &= _kinds(part, defs, depth + 1)
    return kinds


def _values(schema: dict[str, Any]) -> set[str] | None:
    """The values `schema` itself allows, as canonical JSON, if it lists them."""
    found = None
    if "const" in schema:
        found = {_canonical(schema["const"])}
    if isinstance(schema.get("enum"), list):
        listed = {_canonical(v) for v in schema["enum"]}
        found = listed if found is None else found & listed
    return found


def _canonical(value: Any) -> str:
    """JSON in which values JSON Schema holds equal are equal (1 and 1.0)."""
    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return json.dumps(plain(value), sort_keys=True)


def _property(schema: dict[str, Any], name: str) -> Any:
    properties = schema.get("properties")
    if isinstance(properties, dict) and name in properties:
        return properties[name]
    if "additionalProperties" in schema and not schema.get("patternProperties"):
        return schema["additionalProperties"]
    return True


def _required(schema: Any) -> set[str]:
    listed = schema.get("required") if isinstance(schema, dict) else None
    return set(listed) if isinstance(listed, list) else set()


def _disjoint(a: Any, b: Any, defs: dict[str, Any], depth: int) -> bool:
    """True only if no JSON value satisfies both."""
    if a is False or b is False:
        return True
    if depth > MAX_PROOF_DEPTH or not isinstance(a, dict) or not isinstance(b, dict):
        return False
    shared = _kinds(a, defs, depth) & _kinds(b, defs, depth)
    if not shared:
        return True
    values_a, values_b = _values(a), _values(b)
    if values_a is not None and values_b is not None and not values_a & values_b:
        return True
    for one, other in ((a, b), (b, a)):
        branches = one.get("anyOf", one.get("oneOf"))
        if isinstance(branches, list) and all(_disjoint(x, other, defs, depth + 1)
                                               for x in branches):
            return True
        if any(_disjoint(part, other, defs, depth + 1)
               for part in _conjuncts(one, defs)[1:]):
            return True
    if shared <= {"object"}:
        for name in _required(a) | _required(b):
            if _disjoint(_property(a, name), _property(b, name), defs, depth + 1):
                return True
    return False
