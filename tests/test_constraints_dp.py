"""The pieces of structured outputs on tiny automata: the block dynamic programme equals
brute force over every token sequence; the compiled automaton accepts exactly the token
sequences whose text the regular expression matches; specs fail with errors that name
the keyword or limit."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import torch

from engine.constraints.automaton import UNREACHABLE, TokenAutomaton, compile_automaton
from engine.constraints.block_dp import SetTables, best_completion
from engine.constraints.spec import ConstraintError, ConstraintSpec

STOP = 0
TOKENS = {1: b"a", 2: b"b", 3: b"ab", 4: b"{", 5: b"}", 6: b"ba", 7: b"1"}
VOCAB = 9  # token 8 spells nothing: never chosen
REGEXES = [r"(ab|b)*a", r"\{a*\}", r"[ab]{2,3}", r"a|\{1+\}"]


@pytest.fixture(scope="module")
def automata() -> dict[str, TokenAutomaton]:
    return {regex: compile_automaton(ConstraintSpec.regex(regex), TOKENS, [STOP])
            for regex in REGEXES}


def brute_force(a: TokenAutomaton, scores: torch.Tensor, fixed: list[int],
                active: list[bool], start: int, left: int) -> tuple[float, list[int]]:
    """The best tokens for the free active positions, trying every sequence."""
    free = [i for i, (f, on) in enumerate(zip(fixed, active, strict=True)) if on and f < 0]
    best: dict[bool, tuple[float, list[int]]] = {}
    for choice in itertools.product(range(VOCAB), repeat=len(free)):
        tokens = list(fixed)
        for i, token in zip(free, choice, strict=True):
            tokens[i] = token
        state = a.walk(start, [t for t, on in zip(tokens, active, strict=True) if on])
        if state < 0 or int(a.distance[state]) >= UNREACHABLE:
            continue
        total = sum(float(scores[i, tokens[i]]) for i in free)
        within = int(a.distance[state]) <= left
        if within not in best or total > best[within][0]:
            best[within] = (total, [t if on else -1 for t, on in zip(tokens, active,
                                                                     strict=True)])
    return best[True] if True in best else best[False]


@pytest.mark.parametrize("shortcut", [False, True])
@pytest.mark.parametrize("regex", REGEXES)
def test_block_programme_equals_brute_force(automata, regex, shortcut, monkeypatch):
    """shortcut: sets of a quarter of the vocabulary take their best from the top 2
    tokens (often missing it: the exact fallback), the others are reduced in full."""
    if shortcut:
        monkeypatch.setattr(SetTables, "TOP_K", 2)
        monkeypatch.setattr(SetTables, "LARGE_SHARE", 4)
        automata[regex]._on.clear()
    a = automata[regex]
    generator = torch.Generator().manual_seed(len(regex))
    length, cases = 4, 12
    scores = torch.randn(cases, length, VOCAB, generator=generator, dtype=torch.float64) * 3
    fixed, active, start, left = [], [], [], []
    for case in range(cases):
        # a row starts somewhere its automaton reaches; some positions are committed with
        # tokens of a path from there, some lie outside the answer
        state = a.initial
        for token in torch.randint(1, 8, (case % 3,), generator=generator).tolist():
            state = a.next_state[state].get(token, state)
        on = [bool(x) for x in (torch.rand(length, generator=generator) > 0.2)]
        path, here = [], state
        for i in range(length):
            options = sorted(a.next_state[here].items()) if on[i] else []
            options = [(t, s) for t, s in options if int(a.distance[s]) < UNREACHABLE]
            token, here = options[case % len(options)] if options else (-1, here)
            path.append(token if options and torch.rand(1, generator=generator) < 0.4 else -1)
            if on[i] and not options:
                on[i] = False
        fixed.append(path)
        active.append(on)
        start.append(state)
        left.append(case % 4)
    distance = a.distance
    end_ok = distance[None, :] <= torch.tensor(left)[:, None]
    fallback = (distance < UNREACHABLE).expand_as(end_ok)
    got = best_completion(a, scores, torch.tensor(fixed), torch.tensor(active),
                          torch.tensor(start), end_ok, fallback)
    for case in range(cases):
        total, tokens = brute_force(a, scores[case], fixed[case], active[case], start[case],
                                    left[case])
        assert got[case].tolist() == tokens, (regex, case)


@pytest.mark.parametrize("regex", REGEXES)
def test_automaton_accepts_exactly_what_the_regex_matches(automata, regex):
    """Every sequence of up to 4 tokens: it reaches `done` (ends with a stop token) iff
    its text before the stop matches the regex in full; nothing follows a stop but stops."""
    a = automata[regex]
    for length in range(1, 5):
        for tokens in itertools.product([STOP, *TOKENS], repeat=length):
            state = a.walk(a.initial, list(tokens))
            if STOP not in tokens:
                continue
            end = tokens.index(STOP)
            text = b"".join(TOKENS[t] for t in tokens[:end]).decode()
            valid = re.fullmatch(regex, text) is not None and set(tokens[end:]) == {STOP}
            assert (state == a.done) == valid, (regex, tokens)


def test_a_token_the_vocabulary_lacks_names_the_character():
    with pytest.raises(ConstraintError, match="cannot spell"):
        compile_automaton(ConstraintSpec.regex("a+z"), TOKENS, [STOP])


def test_compilation_past_its_time_limit_fails_the_constraint():
    with pytest.raises(ConstraintError, match="longer than"):
        compile_automaton(ConstraintSpec.regex("(a|b){1,200}(ab){1,200}"), TOKENS, [STOP],
                          seconds=0.001)


@pytest.mark.parametrize(("schema", "named"), [
    ({"type": "integer", "minimum": 3}, "'minimum'"),
    ({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}},
     "schema.properties.x: keyword 'uniqueItems'"),
    ({"type": "string", "format": "hostname"}, "format 'hostname'"),
    ({"not": {"type": "string"}}, "'not'"),
    ({"type": "string", "pattern": "a(?=b)"}, "look-around"),
    ({"type": "string", "pattern": "a[b"}, "not a valid regular expression"),
    ({"type": "object", "description": "x" * 1_000_000}, "the limit is 1000000"),
])
def test_unsupported_schemas_name_the_keyword_or_limit(schema, named):
    with pytest.raises(ConstraintError, match=re.escape(named)):
        ConstraintSpec.json_schema(schema).to_regex()


def test_a_schema_that_expands_too_far_names_the_limit():
    """A recursive object of 16 fields: a 200-character schema, an 87-million-character
    regular expression."""
    tree = {"$defs": {"n": {"type": "object", "properties": {
        name: {"$ref": "#/$defs/n"} for name in "abcdefghijklmnop"}}}, "$ref": "#/$defs/n"}
    with pytest.raises(ConstraintError, match="the limit is 100000"):
        ConstraintSpec.json_schema(tree).to_regex()


def test_choices_are_literal_and_specs_round_trip():
    spec = ConstraintSpec.choice(["a.b", "(x)", "c|d"])
    assert [c for c in ["a.b", "(x)", "c|d", "axb", "x"]
            if re.fullmatch(spec.to_regex(), c)] == ["a.b", "(x)", "c|d"]
    assert ConstraintSpec.from_dict(spec.as_dict()) == spec
    schema = {"type": "object", "properties": {"b": {"type": "integer"},
                                               "a": {"type": "string"}}}
    assert json.loads(ConstraintSpec.json_schema(schema).source) == schema
    assert ConstraintSpec.json_schema(schema).digest != ConstraintSpec.regex("x").digest
