"""What a request may ask its output to be: a JSON schema, a regular expression or one of
a list of choices, as a checked, hashable spec; and the regular expression it compiles to.

Torch-free: the service checks every line's spec at submit with `regex()` (keywords,
sizes), long before a worker compiles it over the model's vocabulary
(engine/constraints/automaton.py). A spec is identified by its digest, so each distinct
schema is compiled once per worker."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from engine.constraints import schema
from engine.constraints.limited import run_limited
from engine.constraints.spec_errors import ConstraintError

__all__ = ["ConstraintError", "ConstraintSpec"]

Kind = Literal["json_schema", "regex", "choice"]
KINDS: tuple[Kind, ...] = ("json_schema", "regex", "choice")

# a schema's JSON, a pattern, or the choices' JSON: a schema's cost is bounded by what
# its grammar costs (schema.check_schema: llguidance's limits), not by its text; this
# bounds only reading it (Kubernetes' and CloudFormation's run to a few hundred KB)
MAX_SOURCE_CHARS = 1_000_000
MAX_REGEX_CHARS = 100_000  # the regular expression a schema expands to
MAX_CHOICES = 1_000
MAX_SCHEMA_DEPTH = 32  # nesting of schema objects within one another
EXPAND_SECONDS = 10.0  # expanding a schema into its regular expression
EXPAND_MEMORY_BYTES = 512 * 2**20  # what the expanding child may grow by

# JSON Schema keywords the compiled automaton enforces (outlines-core's JSON schema
# support); annotations that never constrain a value are accepted too. Anything else
# fails the request, naming the keyword, rather than being silently ignored.
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
REGEX_META = set(r"\.+*?()|[]{}^$#&-~")


@dataclass(frozen=True)
class ConstraintSpec:
    """kind and its source: the schema as canonical JSON, the pattern, or the choices as
    a JSON list."""

    kind: Kind
    source: str

    @classmethod
    def json_schema(cls, schema: Any) -> ConstraintSpec:
        if not isinstance(schema, dict):
            raise ConstraintError(f"a JSON schema must be an object, got {type(schema).__name__}")
        return cls("json_schema", _canonical(schema))

    @classmethod
    def regex(cls, pattern: Any) -> ConstraintSpec:
        if not isinstance(pattern, str) or not pattern:
            raise ConstraintError("a regex must be a non-empty string")
        return cls("regex", pattern)

    @classmethod
    def choice(cls, choices: Any) -> ConstraintSpec:
        if (not isinstance(choices, list) or not choices
                or not all(isinstance(c, str) and c for c in choices)):
            raise ConstraintError("choice must be a non-empty list of non-empty strings")
        if len(choices) > MAX_CHOICES:
            raise ConstraintError(f"choice has {len(choices)} entries; the limit is "
                                  f"{MAX_CHOICES}")
        return cls("choice", _canonical(choices))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ConstraintSpec:
        """The inverse of as_dict (how the service stores a spec with its request)."""
        kind, source = raw.get("kind"), raw.get("source")
        if kind not in KINDS or not isinstance(source, str):
            raise ConstraintError(f"not a constraint: {raw!r:.200}")
        return cls(kind, source)

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "source": self.source}

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.kind}\0{self.source}".encode()).hexdigest()

    def to_regex(self) -> str:
        """The regular expression the output must match in full; ConstraintError naming the
        unsupported keyword or the limit exceeded. Cached, failures too: a million lines
        with one schema are checked once."""
        regex, error = _regex(self.kind, self.source)
        if error is not None:
            raise ConstraintError(error)
        return regex

    def check(self) -> None:
        """The checks of to_regex that need no child process (sizes, keywords,
        patterns): all of them but a schema's expansion."""
        _check(self.kind, self.source)


@lru_cache(maxsize=256)  # at most 256 x MAX_REGEX_CHARS characters
def _regex(kind: Kind, source: str) -> tuple[str, str | None]:
    """The regular expression, or why there is none."""
    try:
        return _expanded(kind, source), None
    except ConstraintError as exc:
        return "", str(exc)


def _check(kind: Kind, source: str) -> None:
    if len(source) > MAX_SOURCE_CHARS:
        raise ConstraintError(f"the {kind} is {len(source)} characters long; the limit is "
                              f"{MAX_SOURCE_CHARS}")
    if kind == "regex":
        _check_pattern(source, "the regex")
    elif kind == "json_schema":
        schema.check_source(source)


def _expanded(kind: Kind, source: str) -> str:
    _check(kind, source)
    if kind == "json_schema":
        check_schema(json.loads(source))  # what outlines-core's automaton enforces
    if kind == "regex":
        return source
    if kind == "choice":
        return "|".join("".join("\\" + c if c in REGEX_META else c for c in choice)
                        for choice in json.loads(source))
    # a few keywords (recursive $refs) can expand a small schema enormously: bounded, in
    # a child of a small server process (a large one, the API's, is never forked)
    return str(run_limited(_expand, (source,), EXPAND_SECONDS, "JSON schema",
                           EXPAND_MEMORY_BYTES, "forkserver"))


def _expand(source: str) -> str:
    """The schema's regular expression (outlines-core), within MAX_REGEX_CHARS."""
    from outlines_core.json_schema import build_regex_from_schema

    try:
        regex = build_regex_from_schema(source)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConstraintError(f"the JSON schema is not supported: {str(exc).splitlines()[0]}"
                              ) from exc
    if len(regex) > MAX_REGEX_CHARS:
        raise ConstraintError(f"the JSON schema expands to a {len(regex)}-character regular "
                              f"expression; the limit is {MAX_REGEX_CHARS} (fewer optional "
                              "fields, alternatives or nesting levels)")
    return regex


def check_schema(schema: Any, where: str = "schema", depth: int = 0) -> None:
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
            check_schema(value, inner, depth + 1)
        elif keyword in SCHEMA_LISTS:
            if not isinstance(value, list):
                raise ConstraintError(f"{inner} must be a list of schemas")
            for i, item in enumerate(value):
                check_schema(item, f"{inner}[{i}]", depth + 1)
        elif keyword in SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise ConstraintError(f"{inner} must be an object of schemas")
            for name, item in value.items():
                check_schema(item, f"{inner}.{name}", depth + 1)


def _check_pattern(pattern: Any, where: str) -> None:
    """A pattern the automaton can hold: no look-around or back-references."""
    if not isinstance(pattern, str):
        raise ConstraintError(f"{where} must be a string")
    if re.search(r"\(\?<?[=!]|\\[1-9]", pattern):
        raise ConstraintError(f"{where}: look-around and back-references cannot be compiled "
                              "to an automaton")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConstraintError(f"{where} is not a valid regular expression: {exc}") from exc


def _canonical(value: Any) -> str:
    """Compact JSON in the given key order (a schema's property order is the output's)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
