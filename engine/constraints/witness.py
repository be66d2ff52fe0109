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

Near the canvas's end (slots from `closing`) the witness keeps a proposal only if a
rollout from it still completes the text and a stop token within the canvas; otherwise
it closes the answer: a stop token where the text is complete, else among the proposal
and the allowed tokens of the fewest bytes (and closing quotes and brackets) the one
from which a rollout completes the text in the fewest tokens (each step: a token that
completes it, else a closing quote or bracket, else the shortest allowed), ties by the
model's scores. llguidance knows no distance to the grammar's end (the automaton had
one), so this is how an answer that would run past the canvas ends "stop" rather than
"length"; it is never less valid.

Torch-free; rows are independent, so a row's witness never depends on its neighbours."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engine.constraints.grammar import Grammar, Matcher

# (position in the block's answer slots, allowed tokens) -> the best allowed token
Best = Callable[[int, np.ndarray], int]
CANDIDATES = 8  # the shortest allowed tokens a closing slot weighs
ROLLOUT_CANDIDATES = 16  # those a rollout step looks among
CLOSERS = (b'"', b"}", b"]", b")")


class RowWitness:
    def __init__(self, grammar: Grammar) -> None:
        self.vocabulary = vocabulary = grammar.vocabulary
        self.matcher = Matcher(grammar.matcher(), vocabulary)  # after `walked` tokens
        self.walked = 0
        self.stops = np.zeros(vocabulary.size, dtype=bool)
        self.stops[vocabulary.stop_ids] = True
        self.fill = np.zeros(vocabulary.size, dtype=bool)
        self.fill[vocabulary.filler] = True
        self.closers = vocabulary.ids(CLOSERS)
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

    def search(self, fixed: Sequence[int | None], proposed: Sequence[int], best: Best,
               closing: int | None = None, after: int = 0) -> list[int]:
        """The block's witness over its answer slots: `fixed` the committed token or None
        (masked), `proposed` the decoder's token at each masked slot; from slot `closing`
        on (None: none) masked slots close the answer, `after` answer columns following
        the block."""
        matcher, tail = self.matcher, self.tail
        tokens: list[int] = []
        consumed = 0
        filler = self.vocabulary.filler
        for i, (held, wanted) in enumerate(zip(fixed, proposed, strict=True)):
            token = wanted if held is None else held
            if tail is None and held is None and closing is not None and i >= closing:
                token = self._closing(i, wanted, best, len(fixed) - i + after)
                if not self.stops[token] and token != filler:
                    matcher.consume_token(token)
                    consumed += 1
            elif tail is not None:
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

    def _closing(self, i: int, wanted: int, best: Best, room: int) -> int:
        """The token that best closes the answer at slot i, `room` slots left for it (see
        the module's doc)."""
        matcher = self.matcher
        if self._fits(wanted, room):
            return wanted
        if matcher.is_accepting():
            return best(i, self.stops)
        candidates = self._shortest_allowed(wanted)
        if not candidates:
            return self.vocabulary.filler
        ranked = []
        for token in candidates:
            matcher.consume_token(token)
            ranked.append((self._rollout(room - 1), token))
            matcher.rollback(1)
        first = min(steps for steps, _ in ranked)
        keep = np.zeros(self.vocabulary.size, dtype=bool)
        keep[[token for steps, token in ranked if steps == first]] = True
        return best(i, keep)

    def _fits(self, token: int, room: int) -> bool:
        """Whether the answer, this token first, can still be completed and followed by a
        stop token within `room` tokens (by a rollout)."""
        if self.stops[token]:
            return bool(self.matcher.is_accepting())
        if self.matcher.try_consume_tokens([token]) != 1:
            return False
        steps = self._rollout(room - 2)
        self.matcher.rollback(1)
        return steps <= room - 2

    def _rollout(self, limit: int) -> int:
        """Tokens until the text is complete following `_closer` (limit + 1: not within
        `limit`); the matcher left as it was."""
        matcher, taken = self.matcher, 0
        while not matcher.is_accepting() and taken <= limit:
            token = self._closer()
            if token is None:
                break
            matcher.consume_token(token)
            taken += 1
        complete = matcher.is_accepting()
        matcher.rollback(taken)
        return taken if complete and taken <= limit else limit + 1

    def _closer(self) -> int | None:
        """The rollout's next token: one after which the text is complete, else a closing
        quote or bracket, else the shortest allowed."""
        candidates = self._shortest_allowed(None, ROLLOUT_CANDIDATES)
        for token in candidates:
            if self.matcher.try_consume_tokens([token]) == 1:
                complete = self.matcher.is_accepting()
                self.matcher.rollback(1)
                if complete:
                    return token
        closing = [t for t in candidates if self.vocabulary.tokens[t] in CLOSERS]
        return next(iter(closing or candidates), None)

    def _shortest_allowed(self, wanted: int | None, count: int = 0) -> list[int]:
        """`wanted` if allowed, the allowed closing quotes and brackets, and the `count`
        (CANDIDATES) allowed tokens of the fewest bytes (no stop token)."""
        mask = self.matcher.allowed()
        mask[self.vocabulary.stop_ids] = False
        shortest = self.vocabulary.shortest(mask, count or CANDIDATES)
        first = [wanted] if wanted is not None and mask[wanted] else []
        closers = [t for t in self.closers if mask[t]]
        return list(dict.fromkeys([*first, *closers, *map(int, shortest)]))

    def _best_allowed(self, i: int, best: Best) -> int:
        mask = self.matcher.allowed()
        return best(i, mask) if mask.any() else self.vocabulary.filler
