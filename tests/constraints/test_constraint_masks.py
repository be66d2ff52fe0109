"""The witness's mask plumbing against the obviously right computations: a Matcher's kept
masks (and its state keys) are the masks a fresh llguidance matcher computes after the
same tokens, through every way of consuming, rollbacks and revisits; the shortest
allowed tokens found from the head of the length order are those of a full pass over
it."""

from __future__ import annotations

import numpy as np
import pytest

from dinfer_engine.constraints import grammar as grammar_module
from dinfer_engine.constraints.grammar import Matcher, allowed, compile_grammar
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.vocabulary import Vocabulary

TOKENS = {1: b"a", 2: b"b", 3: b"ab", 4: b"{", 5: b"}", 6: b"ba", 7: b"1", 8: b'"',
          9: b'{"', 10: b"a}"}
# 11-95 spell nothing (11: the filler, 95: the mask): masks of up to 2 tokens are
# kept as ids, the others packed
VOCABULARY = Vocabulary(TOKENS, [0], 96, mask_id=95)


@pytest.mark.parametrize("regex", [r"(ab|b)*a", r"\{(a|\"1*\")*\}", r"[ab1]{2,6}"])
@pytest.mark.parametrize("budget", [40, 10**6])  # bytes: evictions, or none
def test_kept_masks_are_the_masks_of_a_fresh_matcher(regex, budget, monkeypatch):
    monkeypatch.setattr(grammar_module, "KEPT_MASK_BYTES", budget)
    grammar = compile_grammar(ConstraintSpec.regex(regex), VOCABULARY)
    rng = np.random.default_rng(len(regex))
    matcher, path = Matcher(grammar.matcher(), VOCABULARY), []
    for _ in range(400):  # revisits: kept masks (as ids, or packed), misses, evictions
        fresh = grammar.matcher()
        assert fresh.consume_tokens(path) or not path
        expected = allowed(fresh, VOCABULARY)
        assert np.array_equal(matcher.allowed(), expected), path
        raw = grammar_module._unpacked(fresh.compute_bitmask(), VOCABULARY.size)
        assert matcher.state_key() == np.packbits(raw, bitorder="little").tobytes(), path
        assert matcher.is_accepting() == fresh.is_accepting()
        choices = np.flatnonzero(expected)
        choices = choices[choices != 0]
        if rng.random() < 0.4 and path:
            back = int(rng.integers(1, len(path) + 1))
            matcher.rollback(back)
            del path[-back:]
        elif len(choices):
            token = int(rng.choice(choices))
            assert matcher.validate_tokens([token, 12]) == 1  # 12 never fits
            step = rng.random()
            if step < 0.33:
                assert matcher.consume_token(token)
            elif step < 0.66:
                assert matcher.consume_tokens([token])
            else:
                assert matcher.try_consume_tokens([token, 12]) == 1
            path.append(token)
    assert matcher.kept_bytes == sum(m.nbytes for m in matcher._masks.values()) <= budget
    if budget > 40:  # both ways of keeping a mask were used
        assert {m.dtype.name for m in matcher._masks.values()} == {"int32", "uint8"}


def test_the_returned_mask_is_the_callers_own():
    grammar = compile_grammar(ConstraintSpec.regex("a+"), VOCABULARY)
    matcher = Matcher(grammar.matcher(), VOCABULARY)
    first = matcher.allowed()
    first[:] = False
    assert matcher.allowed().any()


def test_shortest_allowed_equals_a_full_pass_over_the_length_order():
    rng = np.random.default_rng(0)
    letters = np.array(list(b"abcdefgh"))
    spelled = {i: bytes(rng.choice(letters, int(rng.integers(1, 9)))) for i in range(1, 6000)}
    vocabulary = Vocabulary(spelled, [0], 6002, mask_id=6001)
    order = vocabulary.by_length
    for density in (0.0, 0.0005, 0.01, 0.3, 1.0):
        for count in (1, 8, 16, 700):
            mask = rng.random(vocabulary.size) < density
            assert np.array_equal(vocabulary.shortest(mask, count),
                                  order[mask[order]][:count]), (density, count)
