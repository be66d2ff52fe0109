"""A JSON schema as llguidance should see it (`prepare_schema`), and the check that the
result builds (`check_schema`), so that every keyword that constrains a value is enforced
exactly or refused by name, with where it is, and never silently weakened.

- Enforced keywords (schema_keywords.ENFORCED) pass as written: llguidance enforces
  them exactly, or fails the build, and the schema is refused naming the keyword.
- Draft-04 to 2019-09 spellings become 2020-12's: boolean exclusiveMinimum/Maximum,
  `items` lists with `additionalItems`, `$ref` siblings dropped where those drafts
  ignore them; every `$ref` becomes a pointer into one top-level `$defs`, through ids
  and anchors (schema_refs.py); unreferenced definitions go.
- Rewritten exactly into enforced keywords: `dependencies` / `dependentRequired` /
  `dependentSchemas` (absent, or present with what it needs), `not` of `required` or of
  `type`, `uniqueItems` where at most one item fits, formats `date` and `date-time`
  (patterns that know leap years).
- Refused by name: `uniqueItems`, `contains`, `propertyNames`, `if`/`then`/`else`,
  `unevaluated*`, dynamic references, other `not`s, standard formats llguidance lacks.
- Ignored (stripped, as validators ignore them): annotations, unknown keys, `x-*`,
  vendor metadata, non-standard formats.

Torch-free: the service runs check_schema on every line at submit."""

from __future__ import annotations

import re
from typing import Any

from dinfer_engine.constraints.schema_keywords import (
    ALL_TYPES,
    ENFORCED,
    FORMAT_PATTERNS,
    LLGUIDANCE_FORMATS,
    REFUSED,
    REFUSED_FORMATS,
    REWRITTEN,
    SCHEMA_LISTS,
    UNKNOWN_TO_DRAFT,
)
from dinfer_engine.constraints.schema_oneof import exact_one_of
from dinfer_engine.constraints.schema_refs import Pointer, References
from dinfer_engine.constraints.spec_errors import ConstraintError

__all__ = ["check_schema", "prepare_schema", "schema_grammar"]

MAX_DEPTH = 64  # schema objects within one another (llguidance's own stack limit is 128)
MAX_DEPENDENCIES = 6  # per object: each doubles the object's alternatives
STRICT_JSON: Any = {"whitespace_flexible": False}  # JSON options where only errors matter
# llguidance build failures that name a keyword it enforces only in part
PARTIAL = {"oneOf constraints are not supported": (
    ("oneOf",), "where its branches cannot be proven disjoint"),
    "min/maxProperties only supported": (
        ("minProperties", "maxProperties"), "unless every property in `properties` is required"),
    "patternProperty regexes": (
        ("patternProperties",), "where two patterns can match the same name")}


def prepare_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as llguidance should see it; ConstraintError naming the keyword and
    where it is for what cannot be enforced exactly."""
    return _Preparer(schema).prepared


def check_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """prepare_schema, then llguidance builds its grammar (no vocabulary needed: a few
    milliseconds, bounded by llguidance's own limits); ConstraintError if it cannot."""
    return schema_grammar(schema, STRICT_JSON)[0]


def schema_grammar(schema: dict[str, Any], defaults: Any,
                   limits: Any = None) -> tuple[dict[str, Any], str]:
    """The prepared schema and its llguidance grammar with `defaults` (JSON options),
    built once and validated within `limits` (llguidance's parser limits, None: its
    defaults); ConstraintError naming the keyword and where it is if it cannot be."""
    preparer = _Preparer(schema)
    grammar, error = _built(preparer.prepared, defaults, limits)
    if not error:
        return preparer.prepared, grammar
    for start, (keywords, why) in PARTIAL.items():
        used = [k for k in keywords if k in preparer.seen] or list(keywords)
        if error.startswith(start):
            where = ", ".join([w for k in used for w in preparer.seen.get(k, [])][:3])
            raise ConstraintError(f"{where or 'schema'}: keyword {used[0]!r} is not "
                                  f"supported {why}")
    for where, pattern in preparer.patterns:
        if _built({"type": "string", "pattern": pattern}, STRICT_JSON, None)[1]:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConstraintError(f"{where}: {pattern!r} is not a valid regular "
                                      f"expression: {exc}") from exc
            raise ConstraintError(f"{where}: pattern {pattern!r} cannot be enforced "
                                  "(look-around and back-references cannot)")
    raise ConstraintError(f"the JSON schema is not supported: {' '.join(error.split())}")


def _built(prepared: dict[str, Any], defaults: Any, limits: Any) -> tuple[str, str]:
    """llguidance's grammar of the prepared schema and why it cannot be built ('' if it
    can)."""
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(prepared, defaults=defaults)
    except ValueError as exc:
        return "", str(exc)
    return grammar, llguidance.LLMatcher.validate_grammar(grammar, None, limits=limits)


class _Preparer:
    def __init__(self, root: dict[str, Any]) -> None:
        if not isinstance(root, dict):
            raise ConstraintError("schema must be a JSON schema object")
        declared = root.get("$schema")
        drafts = [d for d in UNKNOWN_TO_DRAFT if isinstance(declared, str) and d in declared]
        self.legacy = bool(drafts)  # before 2019-09: a $ref's siblings are ignored
        self.unknown = UNKNOWN_TO_DRAFT[drafts[0]] if drafts else set()
        self.one_ofs: list[tuple[dict[str, Any], str]] = []
        self.patterns: list[tuple[str, str]] = []  # where, pattern (for llguidance's error)
        self.refs = References(root)
        self.names: dict[Pointer, str] = {}
        self.defs: dict[str, Any] = {}
        self.seen: dict[str, list[str]] = {}  # keyword -> where (partly enforced ones)
        self.pending: list[Pointer] = []  # $ref targets named, not yet prepared
        top = self.node(root, (), "schema", 0)
        while self.pending:  # a loop, not recursion: chains of $refs can be long
            target = self.pending.pop()
            self.defs[self.names[target]] = self.node(
                self.refs.at(target), target, ".".join(("schema", *target)), 0)
        for out, where in self.one_ofs:
            self.settle_one_of(out, where)
        self.prepared: dict[str, Any] = {"$defs": self.defs, **top} if self.defs else top

    def settle_one_of(self, out: dict[str, Any], where: str) -> None:
        """oneOf as anyOf where exact_one_of proves that the same (in place: key order is
        llguidance's property order); else left to llguidance, noted for its error."""
        branches = exact_one_of(out["oneOf"], self.defs)
        if branches is None:
            self.seen.setdefault("oneOf", []).append(where)
            return
        if "anyOf" in out:
            out["allOf"] = [*out.get("allOf", []), {"anyOf": branches}]
            del out["oneOf"]
            return
        items = [("anyOf", branches) if k == "oneOf" else (k, v) for k, v in out.items()]
        out.clear()
        out.update(items)

    def node(self, node: Any, pointer: Pointer, where: str, depth: int) -> Any:
        """One schema, prepared (a dict, or True/False)."""
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise ConstraintError(f"{where} must be a JSON schema (an object or a boolean)")
        if depth > MAX_DEPTH:
            raise ConstraintError(f"{where}: schemas nest deeper than {MAX_DEPTH} levels")
        keys = ["$ref"] if "$ref" in node and self.legacy else list(node)
        out: dict[str, Any] = {}
        extra: list[Any] = []  # conditions rewritten into allOf
        at_most_one = isinstance(node.get("maxItems"), int) and node["maxItems"] <= 1
        for key in keys:
            value, inner = node[key], f"{where}.{key}"
            if key in self.unknown:
                continue
            if key in REFUSED or (key in ("then", "else") and "if" in node) or (
                    key == "uniqueItems" and value is True and not at_most_one):
                raise ConstraintError(f"{where}: keyword {key!r} is not supported")
            if key in ("minProperties", "maxProperties", "patternProperties"):
                self.seen.setdefault(key, []).append(where)
            if key == "$ref":
                out[key] = self.ref(value, pointer, inner)
            elif key == "items" and isinstance(value, list):
                out["prefixItems"] = self.each(value, (*pointer, key), inner, depth)
                if "additionalItems" in node:
                    out["items"] = self.node(node["additionalItems"],
                                             (*pointer, "additionalItems"),
                                             f"{where}.additionalItems", depth + 1)
            elif key in ("items", "additionalProperties"):
                out[key] = self.node(value, (*pointer, key), inner, depth + 1)
            elif key in SCHEMA_LISTS:
                out[key] = self.each(value, (*pointer, key), inner, depth)
            elif key in ("properties", "patternProperties"):
                out[key] = self.mapping(value, (*pointer, key), inner, depth)
                if key == "patternProperties":
                    self.patterns += [(f"{inner}.{name}", name) for name in out[key]]
            elif key in ("dependencies", "dependentRequired", "dependentSchemas"):
                extra.extend(self.dependencies(value, (*pointer, key), inner, depth))
            elif key == "not":
                extra.append(self.negation(value, inner))
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
                bound = node.get("minimum" if key == "exclusiveMinimum" else "maximum")
                if value and bound is not None:
                    out[key] = bound
            elif key == "format":
                self.format(value, inner, out, extra)
            elif key in ENFORCED:
                out[key] = value
                if key == "pattern" and isinstance(value, str):
                    self.patterns.append((inner, value))
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if node.get(key) is True and bound in out:
                del out[bound]  # draft-04: the bound itself is excluded
        if extra:
            out["allOf"] = [*out.get("allOf", []), *extra]
        if "oneOf" in out:
            self.one_ofs.append((out, where))
        return out

    def each(self, value: Any, pointer: Pointer, where: str, depth: int) -> list[Any]:
        if not isinstance(value, list):
            raise ConstraintError(f"{where} must be a list of schemas")
        return [self.node(item, (*pointer, str(i)), f"{where}[{i}]", depth + 1)
                for i, item in enumerate(value)]

    def mapping(self, value: Any, pointer: Pointer, where: str, depth: int) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ConstraintError(f"{where} must be an object of schemas")
        return {name: self.node(item, (*pointer, name), f"{where}.{name}", depth + 1)
                for name, item in value.items()}

    def ref(self, ref: Any, pointer: Pointer, where: str) -> str:
        """`#`, or `#/$defs/<n>` that will hold the prepared target (each target once)."""
        if not isinstance(ref, str):
            raise ConstraintError(f"{where} must be a string")
        target = self.refs.resolve(ref, self.refs.base(pointer), where)
        if not target:
            return "#"
        if target not in self.names:
            self.names[target] = str(len(self.names))
            self.pending.append(target)
        return f"#/$defs/{self.names[target]}"

    def dependencies(self, value: Any, pointer: Pointer, where: str,
                     depth: int) -> list[dict[str, Any]]:
        """`if name is present, then ...` as anyOf [name absent, name present and ...]."""
        if not isinstance(value, dict):
            raise ConstraintError(f"{where} must be an object")
        if len(value) > MAX_DEPENDENCIES:
            raise ConstraintError(f"{where}: keyword {pointer[-1]!r} is not supported with "
                                  f"more than {MAX_DEPENDENCIES} entries")
        rewritten = []
        for name, needs in value.items():
            present: dict[str, Any] = {"required": [name]}
            if isinstance(needs, list) and all(isinstance(n, str) for n in needs):
                present["required"] += [n for n in needs if n != name]
            else:
                present["allOf"] = [self.node(needs, (*pointer, name), f"{where}.{name}",
                                              depth + 1)]
            rewritten.append({"anyOf": [{"properties": {name: False}}, present]})
        return rewritten

    def negation(self, value: Any, where: str, hops: int = 0) -> Any:
        """`not` where its complement is a schema: of nothing, of `required` properties
        (one of them absent) or of types (the other types), or of a $ref to those."""
        if isinstance(value, dict) and list(value) == ["$ref"] and hops < MAX_DEPTH:
            target = self.refs.resolve(value["$ref"], self.refs.base(()), where)
            return self.negation(self.refs.at(target), where, hops + 1)
        if isinstance(value, bool):
            return not value
        if not isinstance(value, dict):
            raise ConstraintError(f"{where} must be a JSON schema (an object or a boolean)")
        value = {k: v for k, v in value.items() if k in ENFORCED | REWRITTEN | REFUSED}
        if not value:  # only annotations: every value matches it
            return False
        names = value.get("required") if list(value) == ["required"] else None
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return {"type": "object",  # `required` holds for every non-object
                    "anyOf": [{"properties": {name: False}} for name in names]}
        declared = value.get("type") if list(value) == ["type"] else None
        types = {declared} if isinstance(declared, str) else set(
            declared if isinstance(declared, list) and all(
                isinstance(t, str) for t in declared) else [])
        if types and ("integer" not in types or "number" in types):
            kept = [t for t in ALL_TYPES if t not in types]
            return {"type": kept} if kept else False
        where = where.rsplit(".", 1)[0]
        raise ConstraintError(f"{where}: keyword 'not' is not supported (except of "
                              "`required` or `type` alone)")

    def format(self, value: Any, where: str, out: dict[str, Any], extra: list[Any]) -> None:
        if not isinstance(value, str):
            raise ConstraintError(f"{where} must be a string")
        if value in FORMAT_PATTERNS:
            extra.append({"pattern": FORMAT_PATTERNS[value]})
        elif value in LLGUIDANCE_FORMATS:
            out["format"] = value
        elif value in REFUSED_FORMATS:
            raise ConstraintError(f"{where}: format {value!r} is not supported (supported: "
                                  f"{', '.join(sorted({*LLGUIDANCE_FORMATS, *FORMAT_PATTERNS}))}"
                                  "; formats of no standard are ignored)")

