"""The infill task: the middle of a known text given the text before it (the prompt) and
after it (the suffix), in the engine's infill canvas: prompt tokens, a span of `span`
masked positions (the middle, then EOS up to the span's end), then the suffix tokens, no
separators.

Sources: small Python functions of one to four lines (code-like text with newlines and
indentation) and the other tasks' prompts with their answers (the gap always lies in the
answer). Gaps are 1-24 characters, a third of the function gaps a whole line; the span is
the middle's length plus 0-8 positions of slack.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from dinfer_training.example import Example

MAX_MIDDLE = 24
MAX_SLACK = 8
MAX_SPAN = MAX_MIDDLE + MAX_SLACK
FUNCTION_SHARE = 0.5  # the other half of the sources are task prompts and answers

# name choices, arity (the first 1 or 2 identifiers are the arguments) and body lines;
# {0}, {1}, {2} are distinct short identifiers
FUNCTIONS: tuple[tuple[tuple[str, ...], int, tuple[str, ...]], ...] = (
    (("add", "plus", "total"), 2, ("return {0} + {1}",)),
    (("sub", "minus", "diff"), 2, ("return {0} - {1}",)),
    (("mul", "times", "scale"), 2, ("return {0} * {1}",)),
    (("get", "pick", "item"), 2, ("return {0}[{1}]",)),
    (("is_even", "even", "parity"), 1, ("return {0} % 2 == 0",)),
    (("larger", "biggest", "top"), 2, ("if {0} > {1}:", "    return {0}", "return {1}")),
    (("smaller", "least", "low"), 2, ("if {0} < {1}:", "    return {0}", "return {1}")),
    (("twice", "double", "grow"), 2, ("{2} = {0} * 2", "return {2} + {1}")),
    (("total", "acc", "summed"), 1, ("{2} = 0", "for {1} in {0}:", "    {2} += {1}", "return {2}")),
    (("count", "tally", "size"), 1, ("{2} = 0", "for {1} in {0}:", "    {2} += 1", "return {2}")),
    (("first", "head", "front"), 2, ("if {0}:", "    return {0}[0]", "return {1}")),
    (("clip", "limit", "cap"), 2, ("if {0} > {1}:", "    {0} = {1}", "return {0}")),
)


def make_function(rng: random.Random, identifier: Callable[[random.Random], str]) -> str:
    names, arity, lines = rng.choice(FUNCTIONS)
    args: list[str] = []
    while len(args) < 3:
        arg = identifier(rng)
        if arg not in args:
            args.append(arg)
    head = f"def {rng.choice(names)}({', '.join(args[:arity])}):"
    return "\n".join([head] + ["    " + line.format(*args) for line in lines])


def cut(rng: random.Random, text: str, start: int, source: str) -> Example:
    """A gap of 1..MAX_MIDDLE characters in text[start:], and a span with slack."""
    length = rng.randint(1, min(MAX_MIDDLE, len(text) - start))
    begin = rng.randint(start, len(text) - length)
    return gap(rng, text, begin, begin + length, source)


def gap(rng: random.Random, text: str, begin: int, end: int, source: str) -> Example:
    middle = text[begin:end]
    return Example("infill", text[:begin], middle, suffix=text[end:],
                   span=len(middle) + rng.randint(0, MAX_SLACK), source=source)


def make_infill(rng: random.Random, makers: Mapping[str, Callable[[random.Random], Example]],
                identifier: Callable[[random.Random], str]) -> Example:
    """One infill example; `makers` give the task examples whose answers are cut."""
    if rng.random() < FUNCTION_SHARE:
        text = make_function(rng, identifier)
        lines = text.split("\n")
        if rng.random() < 1 / 3:  # a whole body line (without its newline)
            line = rng.randrange(1, len(lines))
            begin = sum(len(x) + 1 for x in lines[:line])
            if len(lines[line]) <= MAX_MIDDLE:
                return gap(rng, text, begin, begin + len(lines[line]), text)
        return cut(rng, text, len(lines[0]) + 1, text)
    base = makers[rng.choice(sorted(makers))](rng)
    return cut(rng, base.prompt + base.answer, len(base.prompt), base.prompt)
