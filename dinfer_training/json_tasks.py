"""The JSON tasks: answers are small JSON objects built from the prompt (compact
`json.dumps` text, keys in a fixed order), each with a JSON Schema the answer satisfies,
so structured decoding can be scored on validity and content.

    json add A B=      -> {"sum": A+B, "a": A, "b": B}, A and B in 0..999 (the sum first,
                          right after the prompt, as in `add`: demo v3 did not learn it last)
    json rev WORD=     -> {"word": WORD, "reversed": WORD reversed}, 3-8 lowercase letters
    json sort DIGITS=  -> {"sorted": [the 4-6 digits ascending], "length": their count}
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable

from dinfer_training.example import Example

JSON_TASKS = ("json_add", "json_rev", "json_sort")
JSON_ANSWER_REGION = 48  # the longest answer (json_rev, 8 letters) is 44 characters

# only keywords structured decoding enforces (docs/structured-outputs.md: no minimum or
# maximum; enum, minItems/maxItems and minLength/maxLength are)
JSON_SCHEMAS: dict[str, dict] = {
    "json_add": {
        "type": "object",
        "properties": {"sum": {"type": "integer"}, "a": {"type": "integer"},
                       "b": {"type": "integer"}},
        "required": ["sum", "a", "b"], "additionalProperties": False,
    },
    "json_rev": {
        "type": "object",
        "properties": {"word": {"type": "string", "minLength": 3, "maxLength": 8},
                       "reversed": {"type": "string", "minLength": 3, "maxLength": 8}},
        "required": ["word", "reversed"], "additionalProperties": False,
    },
    "json_sort": {
        "type": "object",
        "properties": {"sorted": {"type": "array", "minItems": 4, "maxItems": 6,
                                  "items": {"enum": list(range(10))}},
                       "length": {"enum": [4, 5, 6]}},
        "required": ["sorted", "length"], "additionalProperties": False,
    },
}


def dumps(value: object) -> str:
    return json.dumps(value)  # ", " and ": " separators, as the model was trained


def json_add(a: int, b: int) -> Example:
    return Example("json_add", f"json add {a} {b}=", dumps({"sum": a + b, "a": a, "b": b}))


def make_json_add(rng: random.Random) -> Example:
    return json_add(rng.randint(0, 999), rng.randint(0, 999))


def make_json_add_uniform_digits(rng: random.Random) -> Example:
    """Training's draw: each operand's digit count (1-3) uniform, as for `add`."""
    a, b = (rng.randint(*rng.choice(((0, 9), (10, 99), (100, 999)))) for _ in range(2))
    return json_add(a, b)


def make_json_rev(rng: random.Random) -> Example:
    word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8)))
    return Example("json_rev", f"json rev {word}=", dumps({"word": word, "reversed": word[::-1]}))


def make_json_sort(rng: random.Random) -> Example:
    digits = "".join(rng.choices(string.digits, k=rng.randint(4, 6)))
    answer = {"sorted": sorted(int(d) for d in digits), "length": len(digits)}
    return Example("json_sort", f"json sort {digits}=", dumps(answer))


JSON_MAKERS: dict[str, Callable[[random.Random], Example]] = {
    "json_add": make_json_add, "json_rev": make_json_rev, "json_sort": make_json_sort,
}
JSON_TRAINING_MAKERS = {**JSON_MAKERS, "json_add": make_json_add_uniform_digits}


def parse_json(text: str) -> object | None:
    """The value `text` holds, or None when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def same_content(example: Example, output: str) -> bool:
    """The output parses to the reference answer's value (key order and spacing free)."""
    value = parse_json(output)
    return value is not None and value == json.loads(example.answer)
