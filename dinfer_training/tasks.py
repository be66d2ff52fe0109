"""The demo model's checkable tasks: prompt generators, reference answers, and a
deterministic held-out evaluation set that training never sees.

Formats (raw text, no chat template):
    add A B=          -> A+B in decimal, A and B in 0..999     add 436 760= -> 1196
    sort DIGITS=      -> the 4-8 digits sorted ascending        sort 5086002= -> 0002568
    rev WORD=         -> WORD reversed, 3-8 lowercase letters   rev znwvlg= -> glvwnz
    def NAME(ARGS):   -> a one-line body from CODE_TEMPLATES    def get(al, m): -> " return al[m]"
    count A B=        -> A, A+1, ..., B separated by spaces,     count 7 14= -> 7 8 9 10 11 12 13 14
                         24-63 characters, A in 0..999 (the long-answer task)
    json_add, json_rev, json_sort: small JSON objects (dinfer_training/json_tasks.py)
    infill: the middle of a function or a task answer (dinfer_training/infill_tasks.py)

`add`, `sort`, `rev` and `code` are the short tasks (answers fit 24 tokens); `count`
answers span several blocks and need a 64-token answer region (ANSWER_REGION), the JSON
tasks 48; an infill example gives its own span length.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from functools import lru_cache

from dinfer_training.example import Example
from dinfer_training.infill_tasks import MAX_SPAN, make_infill
from dinfer_training.json_tasks import (
    JSON_ANSWER_REGION,
    JSON_MAKERS,
    JSON_TASKS,
    JSON_TRAINING_MAKERS,
)

# new tasks go last: the held-out sets of the earlier ones stay as they were
TASKS = ("add", "sort", "rev", "code", "count", *JSON_TASKS, "infill")
SHORT_TASKS = TASKS[:4]
ANSWER_REGION = {"add": 24, "sort": 24, "rev": 24, "code": 24, "count": 64,
                 **{task: JSON_ANSWER_REGION for task in JSON_TASKS}, "infill": MAX_SPAN}
EVAL_SEED = 1234
HELD_OUT_PER_TASK = 500
# the vocabulary's characters: the demo v1/v2 set (ids 4-52, sorted), then the characters
# added for JSON and code in v3 (ids 53-, in this order); ids 0-3 are the special tokens
BASE_CHARS = "".join(sorted(set(string.ascii_lowercase + string.digits + " =+-*%()[],:_")))
ADDED_CHARS = string.ascii_uppercase + '{}".!;<>/\'#\n\t?&|^~@$`'
CHARS = BASE_CHARS + ADDED_CHARS

# function names per template; arguments are random short identifiers
CODE_TEMPLATES: dict[str, tuple[tuple[str, ...], int, str]] = {
    "add": (("add", "plus", "total", "combine"), 2, " return {0} + {1}"),
    "sub": (("sub", "minus", "diff", "subtract"), 2, " return {0} - {1}"),
    "mul": (("mul", "times", "product", "scale"), 2, " return {0} * {1}"),
    "max": (("larger", "biggest", "maximum", "top"), 2, " return max({0}, {1})"),
    "index": (("get", "at", "pick", "item"), 2, " return {0}[{1}]"),
    "is_even": (("is_even", "even", "check_even", "parity"), 1, " return {0} % 2 == 0"),
}
RESERVED = {"if", "in", "is", "or", "as", "and", "def", "for", "not", "max", "return"}


def identifier(rng: random.Random) -> str:
    while True:
        name = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 3)))
        if name not in RESERVED:
            return name


def make_add(rng: random.Random) -> Example:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    return Example("add", f"add {a} {b}=", str(a + b))


def make_add_uniform_digits(rng: random.Random) -> Example:
    """Training's `add`: each addend's digit count (1-3) is drawn uniformly, so small
    operands are as common as large ones. The held-out set keeps make_add's draw."""
    a, b = (rng.randint(*rng.choice(((0, 9), (10, 99), (100, 999)))) for _ in range(2))
    return Example("add", f"add {a} {b}=", str(a + b))


def make_sort(rng: random.Random) -> Example:
    digits = "".join(rng.choices(string.digits, k=rng.randint(4, 8)))
    return Example("sort", f"sort {digits}=", "".join(sorted(digits)))


def make_rev(rng: random.Random) -> Example:
    word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8)))
    return Example("rev", f"rev {word}=", word[::-1])


def make_code(rng: random.Random) -> Example:
    names, arity, body = CODE_TEMPLATES[rng.choice(sorted(CODE_TEMPLATES))]
    args: list[str] = []
    while len(args) < arity:
        arg = identifier(rng)
        if arg not in args:
            args.append(arg)
    return Example("code", f"def {rng.choice(names)}({', '.join(args)}):", body.format(*args))


def make_count(rng: random.Random) -> Example:
    """Count up from A (0..999) until the answer is at least a length drawn from 24..59,
    so it ends at 24..63 characters."""
    start, target = rng.randint(0, 999), rng.randint(24, 59)
    numbers = [start]
    while len(" ".join(map(str, numbers))) < target:
        numbers.append(numbers[-1] + 1)
    return Example("count", f"count {start} {numbers[-1]}=", " ".join(map(str, numbers)))


SOURCE_MAKERS: dict[str, Callable[[random.Random], Example]] = {
    "add": make_add, "sort": make_sort, "rev": make_rev, "code": make_code, "count": make_count,
    **JSON_MAKERS,
}
TRAINING_SOURCE_MAKERS = {**SOURCE_MAKERS, "add": make_add_uniform_digits,
                          **JSON_TRAINING_MAKERS}
MAKERS: dict[str, Callable[[random.Random], Example]] = {
    **SOURCE_MAKERS, "infill": lambda rng: make_infill(rng, SOURCE_MAKERS, identifier),
}
TRAINING_MAKERS = {**TRAINING_SOURCE_MAKERS,
                   "infill": lambda rng: make_infill(rng, TRAINING_SOURCE_MAKERS, identifier)}


@lru_cache(maxsize=1)
def held_out() -> dict[str, tuple[Example, ...]]:
    """HELD_OUT_PER_TASK distinct examples per task from EVAL_SEED; training never sees
    their prompts."""
    rng = random.Random(EVAL_SEED)
    examples: dict[str, tuple[Example, ...]] = {}
    for task in TASKS:
        seen: dict[tuple[str, str], Example] = {}
        while len(seen) < HELD_OUT_PER_TASK:
            ex = MAKERS[task](rng)
            seen.setdefault((ex.prompt, ex.suffix), ex)
        examples[task] = tuple(seen.values())
    return examples


def eval_set(per_task: int, tasks: tuple[str, ...] = TASKS) -> list[Example]:
    """The first `per_task` held-out examples of each of `tasks`, task by task."""
    if not 0 < per_task <= HELD_OUT_PER_TASK:
        raise ValueError(f"per_task must be in 1..{HELD_OUT_PER_TASK}, got {per_task}")
    return [ex for task in tasks for ex in held_out()[task][:per_task]]


def held_out_keys() -> set[str]:
    """The keys (Example.key) training rejects: every held-out prompt and infill source."""
    return {ex.key for ex in eval_set(HELD_OUT_PER_TASK)}


def answer_region(example: Example) -> int:
    return example.span or ANSWER_REGION[example.task]


def check(example: Example, output: str) -> bool:
    return output == example.answer
