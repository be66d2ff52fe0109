"""A constrained row's witness: a complete valid filling of its current block, consistent
with every token committed so far, so that whatever the decoder commits from it can
still be completed (docs/adr/029-grammar-engine-and-witness-decoding.md, ADR 036). Its
matcher keeps the masks it computed by the tokens since the answer's start (grammar.Matcher,
ADR 035), for the walks and for the room bound's paths alike.

Each iteration the decoder's proposals are checked left to right with the row's
matcher (llguidance), committed positions holding their token; where a proposal fails,
the witness goes on with the best token the grammar allows there by the model's own
scores (`best`), and the proposals after it are checked from there. If a committed token
further on then no longer fits, the block keeps its previous witness, which holds every
committed token (each was committed from it) and is valid. A stop token is placed only
where the text so far is complete, and only stop tokens follow it. A vocabulary that
cannot spell what the grammar requires leaves nothing allowed: the rest of the answer is
the vocabulary's filler token (no stop: finish_reason "length").

The room bound: a witness is kept only if after it the text can still be completed and
a stop token written within the answer's columns left (a path found by
dinfer_engine/constraints/closing.py). When the free walk above leaves no such path, the block
is walked again keeping a `route`, a path from the current state that fits: a proposal
(else the best allowed token) is kept only if a path after it still fits, otherwise the
route's next token is written (a stop token where the text is complete). The route at
the block's start exists whenever the previous block's witness fit, so by induction an
answer whose start had a completion within the canvas ends "stop": a row never commits a
token after which no completion it can find fits. Where none is found at a block's start
the free walk stands (the answer may end "length", valid as far as it goes).

Torch-free; rows are independent, so a row's witness never depends on its neighbours."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dinfer_engine.constraints.closing import State, completer
from dinfer_engine.constraints.grammar import Grammar, Matcher

# (position in the block's answer slots, allowed tokens) -> the best allowed token
Best = Callable[[int, np.ndarray], int]
Route = list[int]


class RowWitness:
    def __init__(self, grammar: Grammar) -> None:
        self.vocabulary = vocabulary = grammar.vocabulary
        self.matcher = Matcher(grammar.matcher(), vocabulary)  # after `walked` tokens
        self.completer = completer(vocabulary, grammar.kind == "json_schema")
        self.scan: State = self.completer.start()  # of the answer's first `walked` tokens
        self.walked = 0
        self.stops = np.zeros(vocabulary.size, dtype=bool)
        self.stops[vocabulary.stop_ids] = True
        self.fill = np.zeros(vocabulary.size, dtype=bool)
        self.fill[vocabulary.filler] = True
        self.tail: np.ndarray | None = None  # once the answer ended: what may follow
        self.witness: list[int] | None = None  # of the block starting at `walked`
        self.route: Route | None = None  # a route after the witness, if one is known
        self._start: tuple[int, Route | None] | None = None  # (limit, route) this block
        self._carried: Route | None = None  # the last block's route, from this block

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
            else:
                self.scan = self.completer.feed(self.scan, [token])
        self.walked += len(committed)
        self._carried = self.route if list(committed) == self.witness else None
        self.witness = self.route = self._start = None

    def search(self, fixed: Sequence[int | None], proposed: Sequence[int], best: Best,
               after: int | None = None) -> list[int]:
        """The block's witness over its answer slots: `fixed` the committed token or None
        (masked), `proposed` the decoder's token at each masked slot, `after` the answer
        columns following the block (None: no room bound)."""
        walked = self._walk(fixed, proposed, best)
        if walked is not None and after is not None:
            route = self._fits(walked[0], after)
            if route is not None:
                walked = (walked[0], route)
            elif (start := self._route(len(fixed) + after - 1)) is not None:
                walked = self._walk(fixed, proposed, best, (start, after))
        if walked is None:  # a committed token no longer fits after the changes
            if self.witness is None:
                raise RuntimeError("a constrained row's committed tokens have no witness")
            return self.witness
        self.witness, self.route = walked
        return self.witness

    def _walk(self, fixed: Sequence[int | None], proposed: Sequence[int], best: Best,
              tight: tuple[Route, int] | None = None) -> tuple[list[int], Route | None] | None:
        """One left-to-right walk (see the module's doc) and, for a tight one, the route
        after it; `tight`: the route from the block's start and the columns after the
        block. None: a committed token does not fit."""
        matcher, tail, state = self.matcher, self.tail, self.scan
        tokens: list[int] = []
        consumed = 0
        filler = self.vocabulary.filler
        route: Route = tight[0] if tight else []
        for i, (held, wanted) in enumerate(zip(fixed, proposed, strict=True)):
            token = wanted if held is None else held
            if tail is not None:
                if not tail[token]:
                    if held is not None:
                        break
                    token = best(i, tail)
            elif tight is not None:
                step = self._tight(i, held, wanted, best, route, state,
                                   len(fixed) - i + tight[1])
                if step is None:
                    break
                token, route = step
            elif (matcher.is_accepting() if self.stops[token]
                  else matcher.validate_tokens([token]) == 1):
                pass
            elif held is not None:
                break
            else:
                token = self._best_allowed(i, best)
            if tail is None and (self.stops[token] or token == filler):
                tail = self.stops if self.stops[token] else self.fill
            elif tail is None:
                matcher.consume_token(token)
                consumed += 1
                state = self.completer.feed(state, [token])
            tokens.append(token)
        matcher.rollback(consumed)
        if len(tokens) < len(fixed):
            return None
        return tokens, (route if tight or tail is not None else None)

    def _tight(self, i: int, held: int | None, wanted: int, best: Best, route: Route,
               state: State, room: int) -> tuple[int, Route] | None:
        """The token at slot i of a tight walk and the route after it, `room` answer
        columns from this one on; None if the committed token there leaves none."""
        if held is not None:
            after = self._after(held, route, state, room)
            return None if after is None else (held, after)
        after = self._after(wanted, route, state, room)
        if after is not None:
            return wanted, after
        token = self._best_allowed(i, best)
        after = self._after(token, route, state, room)
        if after is not None:
            return token, after
        if not route:  # the text is complete: the route is a stop token
            return best(i, self.stops), []
        return route[0], route[1:]

    def _after(self, token: int, route: Route, state: State, room: int) -> Route | None:
        """A route after `token` at a slot with `room` columns from it on (a stop token
        included), or None."""
        matcher = self.matcher
        if self.stops[token]:
            return [] if matcher.is_accepting() else None
        if route and token == route[0]:
            return route[1:]
        if token == self.vocabulary.filler or matcher.try_consume_tokens([token]) != 1:
            return None
        found = self.completer.greedy(matcher, self.completer.feed(state, [token]),
                                      room - 2)
        matcher.rollback(1)
        return found

    def _fits(self, tokens: list[int], after: int) -> Route | None:
        """A route after the walk's tokens within `after` columns, a stop token included
        ([] once the walk ended); None if none is found."""
        if any(self.stops[t] or t == self.vocabulary.filler for t in tokens):
            return []
        self.matcher.consume_tokens(tokens)
        found = self.completer.greedy(self.matcher, self.completer.feed(self.scan, tokens),
                                      after - 1)
        self.matcher.rollback(len(tokens))
        return found

    def _route(self, limit: int) -> Route | None:
        """A path of at most `limit` tokens from the block's start to a complete text: the
        last block's route, else one searched for (once per block and limit)."""
        if self.tail is not None:
            return []
        if self._start is None or self._start[0] != limit:
            carried = self._carried
            self._start = (limit, carried if carried is not None and len(carried) <= limit
                           else self.completer.search(self.matcher, self.scan, limit))
        return self._start[1]

    def _best_allowed(self, i: int, best: Best) -> int:
        mask = self.matcher.allowed()
        return best(i, mask) if mask.any() else self.vocabulary.filler
