"""What a request may ask its output to be: a JSON schema, a regular expression, one of
a list of choices, or a Lark grammar (llguidance's dialect, `%json` inside: function
calling's text-or-call answers, dinfer_batch/formats/function_calling/tool_grammar.py), as a
checked, hashable spec; and the llguidance grammar it becomes.

Torch-free: the service checks every line's spec at submit with `grammar()` (keywords,
sizes, and llguidance's own validation of the grammar, without a vocabulary: a few
milliseconds, bounded by llguidance's parser limits), long before a worker matches
answers against it over the model's vocabulary (dinfer_engine/constraints/grammar.py). A spec
is identified by its digest, so each distinct schema is prepared once per process."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from dinfer_engine.constraints.schema import schema_grammar
from dinfer_engine.constraints.spec_errors import ConstraintError

__all__ = ["ConstraintError", "ConstraintSpec"]

Kind = Literal["json_schema", "regex", "choice", "lark"]
KINDS: tuple[Kind, ...] = ("json_schema", "regex", "choice", "lark")

# a schema's JSON, a pattern, or the choices' JSON: a schema's cost is bounded by what
# its grammar costs (llguidance's limits), not by its text; this bounds only reading it
# (Kubernetes' and CloudFormation's run to a few hundred KB)
MAX_SOURCE_CHARS = 1_000_000
MAX_CHOICES = 1_000
# JSON text between tokens: at most one space
JSON_OPTIONS: Any = {"whitespace_pattern": "[ ]?"}


def parser_limits() -> Any:
    """llguidance's bounds on one grammar's work (docs/adr/029-grammar-engine-and-witness-
    decoding.md): its defaults (grammar size 500,000 symbols, lexer fuel 1,000,000 to
    build and 200,000 per token mask, 50,000 Earley items per mask, 250,000 lexer
    states), and errors that name no parser state."""
    from llguidance import LLParserLimits

    return LLParserLimits(verbose_errors=False)


@dataclass(frozen=True)
class ConstraintSpec:
    """kind and its source: the schema as canonical JSON, the pattern, or the choices as
    a JSON list. `scope`: whose compiled grammars it may share (the service: the
    line's prefix cache account, docs/adr/040-prefix-cache-owners.md), so that one
    owner's compile is never another's cache hit; not stored with the request."""

    kind: Kind
    source: str
    scope: str = ""

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
    def lark(cls, grammar: Any) -> ConstraintSpec:
        if not isinstance(grammar, str) or not grammar:
            raise ConstraintError("a Lark grammar must be a non-empty string")
        return cls("lark", grammar)

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
        digest = hashlib.sha256(f"{self.kind}\0{self.source}".encode()).hexdigest()
        if not self.scope:
            return digest
        return hashlib.sha256(f"{len(self.scope)}:{self.scope}:{digest}".encode()).hexdigest()

    def grammar(self) -> str:
        """The llguidance grammar the output must match in full, validated; ConstraintError
        naming the refused keyword, the limit exceeded or what llguidance found wrong.
        Cached, failures too: a million lines with one schema are checked once; per
        scope, so that one scope's conversion is never another's (faster) hit."""
        grammar, error = _grammar(self.kind, self.source, self.scope)
        if error is not None:
            raise ConstraintError(error)
        return grammar


# sources of up to MAX_SOURCE_CHARS and their grammars, about as long: 64 MB at worst
@lru_cache(maxsize=32)
def _grammar(kind: Kind, source: str, scope: str) -> tuple[str, str | None]:
    """The validated grammar, or why there is none (`scope`: part of the memo's key)."""
    del scope
    from llguidance import LLMatcher

    if len(source) > MAX_SOURCE_CHARS:
        return "", (f"the {kind} is {len(source)} characters long; the limit is "
                    f"{MAX_SOURCE_CHARS}")
    try:
        if kind == "json_schema":  # built and validated once, refusals named
            return schema_grammar(json.loads(source), JSON_OPTIONS, parser_limits())[1], None
        if kind == "lark":
            grammar = LLMatcher.grammar_from_lark(source)
        else:
            grammar = LLMatcher.grammar_from_regex(
                source if kind == "regex" else _alternatives(json.loads(source)))
    except ConstraintError as exc:
        return "", str(exc)
    except ValueError as exc:  # not JSON
        return "", f"the {kind} is not valid: {exc}"
    error = LLMatcher.validate_grammar(grammar, None, limits=parser_limits())
    if error:
        where = {"regex": "the regex", "lark": "the grammar"}.get(kind, "the choices")
        return "", f"{where} is not supported: {_first_lines(error)}"
    return grammar, None


def _alternatives(choices: list[str]) -> str:
    """A regular expression matching exactly one of the choices: every character that is
    not a letter or digit written as its code point."""
    return "|".join("".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}"
                            for c in choice) for choice in choices)


def _first_lines(error: str) -> str:
    """llguidance's message without its source excerpt and blank lines."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    kept = [line for line in lines if not set(line) <= set("^ ") and "|" not in line[:6]]
    return "; ".join(kept)[:500]


def _canonical(value: Any) -> str:
    """Compact JSON in the given key order (a schema's property order is the output's)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
