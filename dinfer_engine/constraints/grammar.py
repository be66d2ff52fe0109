"""A constraint ready to match answers over a model's vocabulary: its llguidance grammar
and a matcher for it, from which each constrained row takes its own copy.

Building one takes milliseconds (llguidance's Earley parser over a lexer built lazily,
token by token mask: docs/adr/029-grammar-engine-and-witness-decoding.md); its work is
bounded by llguidance's parser limits (spec.parser_limits), not by a child process."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from dinfer_engine.constraints.spec import ConstraintSpec, parser_limits
from dinfer_engine.constraints.spec_errors import ConstraintError
from dinfer_engine.constraints.vocabulary import Vocabulary

CANNOT_SPELL = ("the model's vocabulary cannot spell any text the constraint accepts (a "
                "character that no token holds?)")
MATCHER_BYTES = 64 * 1024  # a matcher's parser and lexer before any token, estimated
KEPT_MASK_BYTES = 2 * 2**20  # per Matcher (a row): masks kept, packed or as token ids


class Grammar:
    """A spec's grammar over one vocabulary. Pickled (for tensor-parallel ranks) as its
    text and vocabulary; each process builds its own matcher from them."""

    def __init__(self, spec: ConstraintSpec, text: str, vocabulary: Vocabulary) -> None:
        self.kind, self.text, self.vocabulary = spec.kind, text, vocabulary
        self._template: Any = None

    @property
    def bytes(self) -> int:
        """What keeping it costs, estimated: its text and one matcher."""
        return len(self.text) + MATCHER_BYTES

    def matcher(self) -> Any:
        """A fresh llguidance LLMatcher at the start of an answer."""
        if self._template is None:
            from llguidance import LLMatcher

            template = LLMatcher(self.vocabulary.tokenizer(), self.text,
                                 limits=parser_limits(), log_level=0)
            if template.is_error():
                raise ConstraintError(f"the {self.kind} cannot be compiled: "
                                      f"{template.get_error()[:500]}")
            self._template = template
        return self._template.deep_copy()

    def __getstate__(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "vocabulary": self.vocabulary}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _template=None)


def compile_grammar(spec: ConstraintSpec, vocabulary: Vocabulary) -> Grammar:
    """The spec's grammar over `vocabulary`; ConstraintError for one that cannot be
    compiled (refused, past llguidance's limits, or nothing of it spellable)."""
    grammar = Grammar(spec, spec.grammar(), vocabulary)
    start = grammar.matcher()
    if not start.is_accepting() and not allowed(start, vocabulary).any():
        raise ConstraintError(CANNOT_SPELL)
    return grammar


def allowed(matcher: Any, vocabulary: Vocabulary) -> np.ndarray:
    """Bool [vocabulary]: the tokens the grammar allows next, the stop tokens only where
    it accepts the text so far (llguidance also allows them where nothing else can
    follow); none once the matcher is in error (past a limit)."""
    if matcher.is_error():
        return np.zeros(vocabulary.size, dtype=bool)
    mask = _unpacked(matcher.compute_bitmask(), vocabulary.size)
    mask[vocabulary.stop_ids] = matcher.is_accepting()
    return mask


def _unpacked(bits: bytes | np.ndarray, size: int) -> np.ndarray:
    # unpackbits writes a fresh array of 0 and 1 bytes: read as bools without a copy
    return np.unpackbits(np.frombuffer(bits, dtype=np.uint8),
                         bitorder="little")[:size].view(bool)


class Matcher:
    """An llguidance matcher that knows the tokens it holds since the answer's start, and
    keeps the masks it computed by them (the most recently used, KEPT_MASK_BYTES): the
    witness asks for the allowed tokens at the same states again and again (each
    iteration checks the block anew; the room bound's paths (dinfer_engine/constraints/closing.py)
    from neighbouring candidates share their first steps), and a mask costs a pass over
    the whole vocabulary. The matcher's state is a function of those tokens, so
    a kept mask is the one llguidance would compute again. Most masks allow a few tokens:
    those are kept as their ids. Its token methods are llguidance's of the same name,
    keeping the tokens held in step."""

    def __init__(self, matcher: Any, vocabulary: Vocabulary) -> None:
        self._matcher, self.vocabulary = matcher, vocabulary
        self._path: list[int] = []
        self._masks: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self.kept_bytes = 0

    def consume_token(self, token: int) -> bool:
        consumed = bool(self._matcher.consume_token(token))
        if consumed:
            self._path.append(token)
        return consumed

    def consume_tokens(self, tokens: list[int]) -> bool:
        consumed = bool(self._matcher.consume_tokens(tokens))
        if consumed:
            self._path.extend(tokens)
        return consumed

    def try_consume_tokens(self, tokens: list[int]) -> int:
        taken = int(self._matcher.try_consume_tokens(tokens))
        self._path.extend(tokens[:taken])
        return taken

    def validate_tokens(self, tokens: list[int]) -> int:
        return int(self._matcher.validate_tokens(tokens))

    def rollback(self, count: int) -> None:
        if count:
            self._matcher.rollback(count)
            del self._path[-count:]

    def is_accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    def compute_ff_bytes(self) -> bytes:
        return bytes(self._matcher.compute_ff_bytes())

    def compute_ff_tokens(self) -> list[int]:
        return list(self._matcher.compute_ff_tokens())

    def allowed(self) -> np.ndarray:
        """`allowed` at the current state, a fresh array the caller may change."""
        if self._matcher.is_error():
            return np.zeros(self.vocabulary.size, dtype=bool)
        mask = self._mask()
        mask[self.vocabulary.stop_ids] = self.is_accepting()
        return mask

    def state_key(self) -> bytes:
        """llguidance's mask at the current state, packed: states with the same key allow
        the same tokens (compute_bitmask's bits, kept)."""
        return np.packbits(self._mask(), bitorder="little").tobytes()

    def _mask(self) -> np.ndarray:
        """Bool [vocabulary]: llguidance's mask (stop tokens as it sets them), kept."""
        matcher, size = self._matcher, self.vocabulary.size
        key = tuple(self._path)
        kept = None if matcher.is_error() else self._masks.get(key)
        if kept is not None and kept.dtype == np.uint8:  # packed
            self._masks.move_to_end(key)
            return _unpacked(kept, size)
        if kept is not None:  # the allowed tokens' ids
            self._masks.move_to_end(key)
            mask = np.zeros(size, dtype=bool)
            mask[kept] = True
            return mask
        bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        mask = _unpacked(bits, size)
        if not matcher.is_error():  # a mask past a limit is not kept
            few = 4 * np.count_nonzero(mask) < bits.nbytes  # its int32 ids are smaller
            self._keep(key, np.flatnonzero(mask).astype(np.int32) if few else bits)
        return mask

    def _keep(self, key: tuple[int, ...], ids: np.ndarray) -> None:
        self._masks[key] = ids
        self.kept_bytes += ids.nbytes
        while self.kept_bytes > KEPT_MASK_BYTES and self._masks:
            self.kept_bytes -= self._masks.popitem(last=False)[1].nbytes
