"""What each JSON Schema keyword (draft-04 to 2020-12 spellings) becomes on its way to
llguidance (dinfer_engine/constraints/schema.py): enforced as written, rewritten into keywords
llguidance enforces exactly, refused by name, or ignored because it constrains nothing.

Torch-free and llguidance-free: tables and the exact patterns of two formats."""

from __future__ import annotations

# Passed to llguidance as written; it enforces them exactly or fails the build (oneOf
# with branches it cannot prove disjoint, min/maxProperties over optional properties,
# overlapping patternProperties), and then the schema is refused naming the keyword.
ENFORCED = frozenset({
    "type", "enum", "const", "anyOf", "allOf", "oneOf", "$ref",
    "properties", "required", "additionalProperties", "patternProperties",
    "minProperties", "maxProperties",
    "items", "prefixItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})

# Rewritten into enforced keywords (schema.py says how), or dropped where they are
# vacuous (uniqueItems false, additionalItems beside a single `items` schema).
REWRITTEN = frozenset({
    "additionalItems", "dependencies", "dependentRequired", "dependentSchemas", "not",
    "uniqueItems", "if", "then", "else"})

# Constrain a value in ways llguidance's grammar cannot hold: refused, naming them.
REFUSED = frozenset({
    "contains", "minContains", "maxContains", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "$recursiveRef", "$dynamicRef"})

# Refused keywords a declared older draft does not know: its validators ignore them, so
# they are ignored too (`if` in a draft-04 schema constrains nothing).
_NOT_BEFORE_2019 = {"minContains", "maxContains", "unevaluatedItems", "unevaluatedProperties",
                    "$recursiveRef", "$dynamicRef"}
_NOT_BEFORE_7 = {"if", "then", "else", *_NOT_BEFORE_2019}
UNKNOWN_TO_DRAFT = {"draft-03": {"contains", "propertyNames", *_NOT_BEFORE_7},
                    "draft-04": {"contains", "propertyNames", *_NOT_BEFORE_7},
                    "draft-06": _NOT_BEFORE_7, "draft-07": _NOT_BEFORE_2019}

# Identify, locate or describe: read for `$ref` resolution (ids, anchors, definitions),
# then stripped. Every other key (unknown keys, `x-*`, vendor metadata such as
# Snowplow's `self`, `_format`, `example`, `propertyOrder`, `readonly`) is stripped too,
# as validators ignore it.
LOCATORS = frozenset({"$schema", "$id", "id", "$anchor", "$dynamicAnchor",
                      "$recursiveAnchor", "$defs", "definitions"})

# keywords whose value is one schema, a list of schemas, or a name -> schema map
ONE_SCHEMA = ("additionalProperties", "additionalItems", "not", "if", "then", "else",
              "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties")
SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")

# Formats llguidance enforces exactly (date and date-time are given exact patterns below:
# llguidance's own accept February 29th of any year).
LLGUIDANCE_FORMATS = frozenset({"time", "duration", "email", "hostname", "ipv4", "ipv6",
                                "uuid", "uri"})
# Standard formats (2020-12, and what jsonschema's format checkers know) that llguidance
# lacks: refused. Any other format is no standard's and validators ignore it (int32,
# int64, double, byte, url...): ignored.
REFUSED_FORMATS = frozenset({
    "uri-reference", "iri", "iri-reference", "uri-template", "json-pointer",
    "relative-json-pointer", "regex", "idn-email", "idn-hostname", "color"})

_YEAR = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"  # 0001-9999
_LEAP_YEAR = (r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])"  # divisible by 4, not by 100
              r"|(?:0[48]|[2468][048]|[13579][26])00)")  # centuries divisible by 400
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
              r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
         r"(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
FORMAT_PATTERNS = {"date": f"^{DATE}$", "date-time": f"^{DATE}[tT]{_TIME}$"}

ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")
