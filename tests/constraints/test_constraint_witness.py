"""The witness search on tiny grammars and vocabularies, against brute force: whatever
it returns holds every committed token, and after every prefix of it some valid
completion exists (so the decoder never commits a token after which none does); stop
tokens come only after complete text and only stop tokens follow. With the room bound,
over whole answers of a few blocks: after every prefix a completion and a stop token
still fit in the canvas, so every answer whose start can close within it ends with a
stop token. Specs fail with errors that name the keyword or limit."""

from __future__ import annotations

import itertools
import json
import re
from functools import cache

import numpy as np
import pytest

from dinfer_engine.constraints.grammar import compile_grammar
from dinfer_engine.constraints.spec import ConstraintError, ConstraintSpec
from dinfer_engine.constraints.vocabulary import Vocabulary
from dinfer_engine.constraints.witness import RowWitness

STOP = 0
TOKENS = {1: b"a", 2: b"b", 3: b"ab", 4: b"{", 5: b"}", 6: b"ba", 7: b"1"}
SIZE = 10  # tokens 8 and 9 (the mask) spell nothing: never chosen; 8 is the filler
VOCABULARY = Vocabulary(TOKENS, [STOP], SIZE, mask_id=9)
REGEXES = [r"(ab|b)*a", r"\{a*\}", r"[ab]{2,3}", r"a|\{1+\}"]
LONGEST = 7  # bytes of the longest text checked for completions


def text(tokens: list[int]) -> str:
    return b"".join(TOKENS[t] for t in tokens).decode()


def completable(regex: str, tokens: list[int]) -> bool:
    """Some continuation of at most LONGEST bytes (then a stop) matches in full; after a
    stop token only stop tokens, and the text before it matches."""
    if STOP in tokens:
        end = tokens.index(STOP)
        return set(tokens[end:]) == {STOP} and re.fullmatch(regex, text(tokens[:end])) \
            is not None
    start = text(tokens)
    return any(re.fullmatch(regex, start + "".join(more)) for length in range(LONGEST)
               for more in itertools.product("ab{}1", repeat=length))


@pytest.mark.parametrize("regex", REGEXES)
def test_the_witness_never_leaves_a_prefix_without_a_completion(regex):
    grammar = compile_grammar(ConstraintSpec.regex(regex), VOCABULARY)
    rng = np.random.default_rng(len(regex))
    for _ in range(40):
        row = RowWitness(grammar)
        slots = 4
        fixed: list[int | None] = [None] * slots
        for _step in range(3):  # iterations of one block: propose, search, commit some
            proposed = [int(t) for t in rng.integers(0, SIZE - 1, slots)]
            scores = rng.normal(size=(slots, SIZE))

            def best(i: int, allowed: np.ndarray, scores: np.ndarray = scores) -> int:
                return int(np.where(allowed, scores[i], -np.inf).argmax())

            found = row.search(fixed, proposed, best)
            assert all(f is None or f == t for f, t in zip(fixed, found, strict=True))
            for end in range(1, slots + 1):
                assert completable(regex, found[:end]), (regex, found, end)
            for i in rng.permutation(slots)[:2]:
                fixed[i] = found[i]


@cache
def shortest(regex: str, start: str, most: int) -> int:
    """The fewest tokens that complete `start` to a full match (most + 1: not within
    `most`), by trying every token sequence."""
    if re.fullmatch(regex, start):
        return 0
    if most == 0:
        return 1
    return 1 + min(shortest(regex, start + TOKENS[t].decode(), most - 1) for t in TOKENS)


def fits(regex: str, tokens: list[int], room: int) -> bool:
    """After `tokens` the text can still be completed and a stop token written within
    `room` more tokens (once stopped: it matched)."""
    if STOP in tokens:
        return completable(regex, tokens)
    return room >= 1 and shortest(regex, text(tokens), room - 1) <= room - 1


@pytest.mark.parametrize("regex", [*REGEXES, r"\{(ab)*\}1", r"b*(ab1|\{a\})"])
@pytest.mark.parametrize(("canvas", "block"), [(4, 2), (6, 3), (7, 7)])
def test_the_room_bound_closes_every_answer_that_can_close(regex, canvas, block):
    grammar = compile_grammar(ConstraintSpec.regex(regex), VOCABULARY)
    rng = np.random.default_rng([len(regex), canvas])
    can_close = fits(regex, [], canvas)
    for _ in range(30):
        row, answer = RowWitness(grammar), []
        for start in range(0, canvas, block):
            slots = min(block, canvas - start)
            after = canvas - start - slots
            fixed: list[int | None] = [None] * slots
            while None in fixed:  # iterations of one block: propose, search, commit some
                proposed = [int(t) for t in rng.integers(0, SIZE - 1, slots)]
                scores = rng.normal(size=(slots, SIZE))

                def best(i: int, allowed: np.ndarray, scores: np.ndarray = scores) -> int:
                    return int(np.where(allowed, scores[i], -np.inf).argmax())

                found = row.search(fixed, proposed, best, after)
                assert all(f is None or f == t for f, t in zip(fixed, found, strict=True))
                for end in range(1, slots + 1):
                    done = answer + found[:end]
                    assert completable(regex, done), (regex, done)
                    if can_close:
                        assert fits(regex, done, canvas - len(done)), (regex, done)
                masked = [i for i, f in enumerate(fixed) if f is None]
                for i in rng.permutation(masked)[:rng.integers(1, 3)]:
                    fixed[i] = found[i]
            answer += [t for t in fixed if t is not None]
            row.advance(answer[start:])
        assert (STOP in answer) == can_close, (regex, answer)


def test_a_token_the_vocabulary_lacks_names_the_character():
    with pytest.raises(ConstraintError, match="cannot spell"):
        compile_grammar(ConstraintSpec.regex("[yz]+a"), VOCABULARY)


@pytest.mark.parametrize(("schema", "named"), [
    ({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}},
     "schema.properties.x: keyword 'uniqueItems'"),
    ({"type": "string", "format": "regex"}, "format 'regex'"),
    ({"not": {"pattern": "a"}}, "'not'"),
    ({"type": "string", "pattern": "a(?=b)"}, "look-around"),
    ({"type": "string", "pattern": "a[b"}, "not a valid regular expression"),
    ({"type": "string", "description": "x" * 1_000_000}, "the limit is 1000000"),
])
def test_unsupported_schemas_name_the_keyword_or_limit(schema, named):
    with pytest.raises(ConstraintError, match=re.escape(named)):
        ConstraintSpec.json_schema(schema).grammar()


def test_regexes_llguidance_refuses_are_named():
    with pytest.raises(ConstraintError, match="the regex is not supported: .*look-around"):
        ConstraintSpec.regex("a(?=b)").grammar()


def test_choices_are_literal_and_specs_round_trip():
    spec = ConstraintSpec.choice(["a.b", "(x)", 'c|d"é'])
    vocabulary = Vocabulary({i + 1: c.encode() for i, c in enumerate('a.b(x)c|d"é')},
                            [0], 16, 15)
    grammar = compile_grammar(spec, vocabulary)
    for choice, accepted in (("a.b", True), ("(x)", True), ('c|d"é', True), ("axb", False),
                             ("x", False)):
        matcher = grammar.matcher()
        ids = [vocabulary.tokens.index(c.encode()) for c in choice]
        assert (matcher.consume_tokens(ids) and matcher.is_accepting()) == accepted, choice
    assert ConstraintSpec.from_dict(spec.as_dict()) == spec
    schema = {"type": "object", "properties": {"b": {"type": "integer"},
                                               "a": {"type": "string"}}}
    assert json.loads(ConstraintSpec.json_schema(schema).source) == schema
    assert ConstraintSpec.json_schema(schema).digest != ConstraintSpec.regex("x").digest
