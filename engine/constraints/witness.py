"""A constrained row's witness: a complete valid filling of its current block, consistent
with every token committed so far, so that whatever the decoder commits from it can
still be completed (docs/adr/029-grammar-engine-and-witness-decoding.md).

Each iteration the decoder's proposals are checked left to right with the row's
matcher (llguidance), committed positions holding their token; where a proposal fails,
the witness goes on with the best token the grammar allows there by the model's own
scores (`best`), and the proposals after it are checked from there. If a committed token
further on then no longer fits, the block keeps its previous witness, which holds every
committed token (each was committed from it) and is valid. A stop token is placed only
where the text so far is complete, and only stop tokens follow it. A vocabulary that
cannot spell what the grammar requires leaves nothing allowed: the rest of the answer is
the vocabulary's filler token (no stop: finish_reason "length").

Torch-free; rows are independent, so a row's witness never depends on its neighbours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.constraints.grammar import Grammar, allowed

# (position in the block's answer slots, allowed tokens) -> the best allowed token
Best = Callable[[int, np.ndarray], int]


class RowWitness:
    def __init__(self, grammar: Grammar) -> None:
        self.vocabulary = vocabulary = grammar.vocabulary
        self.matcher: Any = grammar.matcher()  # after the answer's first `walked` tokens
        self.walked = 0
        self.stops = np.zeros(vocabulary.size, dtype=bool)
        self.stops[vocabulary.stop_ids] = True
        self.fill = np.zeros(vocabulary.size, dtype=bool)
        self.fill[vocabulary.filler] = True
        self.tail: np.ndarray | None = None  # once the answer ended: what may follow
        self.witness: list[int] | None = None  # of the block starting at `walked`

    def advance(self, committed: Sequence[int]) -> None:
        """Take the committed tokens of the blocks finished since (in answer order): the
        matcher moves past them and the next block starts without a witness."""
        for token in committed:
            if self.tail is not None:
                continue
            if self.stops[token]:
                self.tail = self.stops
            elif token == self.vocabulary.filler:
                self.tail = self.fill
            elif not self.matcher.consume_token(token):
                raise RuntimeError("a constrained row holds a token its grammar refuses")
        self.walked += len(committed)
        self.witness = None

    def search(self, fixed: Sequence[int | None], proposed: Sequence[int], best: Best
               ) -> list[int]:
        """The block's witness over its answer slots: `fixed` the committed token or None
        (masked), `proposed` the decoder's token at each masked slot."""
        matcher, tail = self.matcher, self.tail
        tokens: list[int] = []
        consumed = 0
        filler = self.vocabulary.filler
        for i, (held, wanted) in enumerate(zip(fixed, proposed, strict=True)):
            token = wanted if held is None else held
            if tail is not None:
                if not tail[token]:
                    if held is not None:
                        break
                    token = best(i, tail)
            elif self.stops[token] and matcher.is_accepting():
                pass
            elif not self.stops[token] and matcher.try_consume_tokens([token]) == 1:
                consumed += 1
            elif held is not None:
                break
            else:
                token = self._best_allowed(i, best)
                if not self.stops[token] and token != filler:
                    matcher.consume_token(token)
                    consumed += 1
            if tail is None and (self.stops[token] or token == filler):
                tail = self.stops if self.stops[token] else self.fill
            tokens.append(token)
        matcher.rollback(consumed)
        if len(tokens) < len(fixed):  # a committed token no longer fits after the changes
            if self.witness is None:
                raise RuntimeError("a constrained row's committed tokens have no witness")
            return self.witness
        self.witness = tokens
        return tokens

    def _best_allowed(self, i: int, best: Best) -> int:
        mask = allowed(self.matcher, self.vocabulary)
        return best(i, mask) if mask.any() else self.vocabulary.filler
