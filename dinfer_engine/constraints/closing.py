"""How an answer can still be completed: a short token path from a matcher's state to a
text the grammar accepts, so that the witness (dinfer_engine/constraints/witness.py) never
commits a token after which no completion fits in the canvas.

llguidance knows which tokens may follow, not how far the grammar's end is, so the path
is searched for. For JSON (a schema's grammar) a scan of the text's bytes gives a lower
bound on the bytes still needed (`JsonScan`: one closing byte per open object or array,
a closing quote inside a string, a value after a colon...); candidate tokens are ranked
by that bound after them. `greedy` follows, from each state, a token after which the
text is complete, else the grammar's forced bytes, else the allowed single-byte token of
the lowest bound (closing quotes and brackets before commas, a digit before a string;
see `_ordered`); it is a few microseconds a step. The bound counts bytes and greedy
counts tokens: it stops a path whose bound exceeds the tokens left, a path of
multi-byte tokens could sometimes fit there (so it errs towards closing early).
`search` plans the shortest path it can find where the greedy one does not close in
time (each block's start at most; ADR 049): an A* search (tokens so far plus the bound)
within a budget, whose moves are the grammar's forced tokens taken whole, else single
tokens. Greedy writes the optional properties llguidance offers before a required one,
so an open object's shortest answer is often much shorter than greedy's; the search
tries each key apart, and keeps its tree small by what JSON allows: where the innermost
bracket may close, only closing moves (more items, keys or digits only lengthen the
text); no spaces; one of the moves that leave the same scan state (a digit among
digits), told apart inside strings by the next mask and forced bytes; a text reached
twice (two tokenizations) once.
Both ask the row's grammar.Matcher for masks, which it keeps by the tokens consumed, so
a path's first steps, shared by its neighbours and by the next iteration, are masked
once, and take the shortest allowed tokens from the head of the length order
(Vocabulary.shortest, ADR 035).
Both give a path the matcher accepted, so any answer built on it is valid; neither
proves that no path exists, so a schema whose completions all escape them ends
"length" rather than "stop", never invalid.

Torch-free; nothing here depends on other rows."""

from __future__ import annotations

import heapq
from functools import lru_cache

import numpy as np

from dinfer_engine.constraints.grammar import Matcher
from dinfer_engine.constraints.vocabulary import Vocabulary

# (open brackets, mode, bytes a mode still needs)
State = tuple[str, str, int]
START: State = ("", "V", 0)
NOT_JSON: State = ("", "X", 0)
SEARCH_BUDGET = 256  # states a search expands
CHILDREN = 4  # distinct children a search keeps per state
EXAMINED = 12  # candidates a search looks at per state
LITERALS = {ord("t"): 3, ord("f"): 4, ord("n"): 3}  # letters after the first
DIGITS = frozenset(b"0123456789")
SPACE = frozenset(b" \t\n\r")
# what each mode still needs at least: a value (1), a key, colon and value (4)...
PENDING = {"V": 1, "V0": 0, "K": 4, "K0": 0, "Q": 3, "S": 1, "C": 2, "A": 0, "X": 0}


class JsonScan:
    """A JSON text's structure, byte by byte: which brackets are open and what comes
    next. Modes: V value (V0: or the array's end), K key (K0: or the object's end),
    Q / S inside a key / value string (QE, SE after a backslash; QU, SU in a \\u escape
    with n hex digits to go), C colon, A after a value, N number (n: a digit needed),
    L literal (n letters to go), X not JSON (no bound)."""

    @staticmethod
    @lru_cache(maxsize=1 << 16)
    def feed(state: State, data: bytes) -> State:
        for byte in data:
            state = _step(state, byte)
        return state

    @staticmethod
    def bound(state: State) -> int:
        """Bytes still needed at least to complete the text."""
        stack, mode, n = state
        if mode in PENDING:
            return len(stack) + PENDING[mode]
        extra = {"QE": 4, "QU": 3 + n, "SE": 2, "SU": 1 + n}.get(mode, n)
        return len(stack) + extra


def _step(state: State, byte: int) -> State:
    stack, mode, n = state
    if mode == "X":
        return state
    if mode in ("Q", "S"):
        if byte == ord('"'):
            return (stack, "C" if mode == "Q" else "A", 0)
        return (stack, mode + "E", 0) if byte == ord("\\") else state
    if mode in ("QE", "SE"):
        return (stack, mode[0] + "U", 4) if byte == ord("u") else (stack, mode[0], 0)
    if mode in ("QU", "SU"):
        return (stack, mode[0], 0) if n == 1 else (stack, mode, n - 1)
    if mode == "L":
        return (stack, "A", 0) if n == 1 else (stack, "L", n - 1)
    if mode == "N":
        if byte in DIGITS:
            return (stack, "N", 0)
        if byte in b".eE+-":
            return (stack, "N", 1)
        mode = "A"
    if byte in SPACE:
        return (stack, mode, n)
    if mode in ("V", "V0"):
        return _value(stack, mode, byte)
    if mode in ("K", "K0"):
        if byte == ord('"'):
            return (stack, "Q", 0)
        return _close(stack, byte) if mode == "K0" else NOT_JSON
    if mode == "C":
        return (stack, "V", 0) if byte == ord(":") else NOT_JSON
    if byte == ord(","):  # mode A
        return (stack, "K" if stack[-1:] == "{" else "V", 0) if stack else NOT_JSON
    return _close(stack, byte)


def _value(stack: str, mode: str, byte: int) -> State:
    if byte == ord('"'):
        return (stack, "S", 0)
    if byte in b"{[":
        return (stack + chr(byte), "K0" if byte == ord("{") else "V0", 0)
    if byte in DIGITS or byte == ord("-"):
        return (stack, "N", int(byte == ord("-")))
    if byte in LITERALS:
        return (stack, "L", LITERALS[byte])
    return _close(stack, byte) if mode == "V0" else NOT_JSON


def _close(stack: str, byte: int) -> State:
    closes = {ord("}"): "{", ord("]"): "["}.get(byte)
    if closes is None or stack[-1:] != closes:
        return NOT_JSON
    return (stack[:-1], "A", 0)


class Completer:
    """Paths to a complete text over one vocabulary; `json` when the grammar is a JSON
    schema's (else every state's bound is 0 and candidates go shortest first)."""

    def __init__(self, vocabulary: Vocabulary, json: bool) -> None:
        self.vocabulary, self.json = vocabulary, json
        singles = [i for i in vocabulary.by_length[:512].tolist()
                   if vocabulary.lengths[i] == 1]
        self.singles = np.array(singles, dtype=np.int64)
        self.spaces = np.array([i for i in singles if vocabulary.tokens[i][0] in SPACE],
                               dtype=np.int64)
        self._order: dict[State, list[tuple[int, int]]] = {}

    def start(self) -> State:
        return START if self.json else NOT_JSON

    def feed(self, state: State, tokens: list[int]) -> State:
        if not self.json:
            return state
        for token in tokens:
            state = JsonScan.feed(state, self.vocabulary.tokens[token])
        return state

    def greedy(self, matcher: Matcher, state: State, limit: int) -> list[int] | None:
        """A path of at most `limit` tokens to a complete text by the greedy rule (see
        the module's doc); None if it finds none. The matcher is left as it was."""
        if limit < 0:
            return None
        path: list[int] = []
        while not matcher.is_accepting():
            if len(path) >= limit or JsonScan.bound(state) > limit - len(path):
                break
            token = self._next(matcher, state)
            if token is None:
                break
            matcher.consume_token(token)
            path.append(token)
            state = self.feed(state, [token])
        done = matcher.is_accepting()
        matcher.rollback(len(path))
        return path if done else None

    def _next(self, matcher: Matcher, state: State) -> int | None:
        if matcher.compute_ff_bytes():
            forced = matcher.compute_ff_tokens()
            if forced and matcher.try_consume_tokens(forced[:1]) == 1:
                matcher.rollback(1)
                return int(forced[0])
        mask = matcher.allowed()
        first = None
        for bound, token in self._ordered(state):
            if not mask[token] or (first is not None and self.json and bound > 0):
                continue  # after `first` only a token completing the text would beat it
            matcher.consume_token(token)
            done = matcher.is_accepting()
            matcher.rollback(1)
            if done:
                return token
            if first is None:
                first = token
                if self.json and bound > 0:
                    return first
        if first is None:
            shortest = self._shortest(mask, state)
            return shortest[0] if shortest else None
        return first

    def _ordered(self, state: State) -> list[tuple[int, int]]:
        """The single-byte tokens and the bound after each: by that bound, ties by id;
        after them those that leave the scan where it was (a string's characters, a
        number's further digits: where they are all the grammar allows they are taken,
        but never in a loop while a comma is allowed), and last bytes that are not JSON
        there and spaces (JSON never needs one: after `{` a space keeps the object's
        bound of 0, which `}` has only where it is allowed)."""
        order = self._order.get(state)
        if order is None:
            tokens = self.vocabulary.tokens
            after = [(self.feed(state, [t]), t) for t in self.singles.tolist()]
            order = [(JsonScan.bound(child), t) for child, t in sorted(after, key=lambda pair: (
                self.json and (pair[0][1] == "X" or tokens[pair[1]][0] in SPACE),
                self.json and pair[0][:2] == state[:2], JsonScan.bound(pair[0])))]
            if len(self._order) < 4096:
                self._order[state] = order
        return order

    def _shortest(self, mask: np.ndarray, state: State) -> list[int]:
        """The allowed tokens of the fewest bytes (no stop token), by the bound after."""
        mask[self.vocabulary.stop_ids] = False
        shortest = self.vocabulary.shortest(mask, EXAMINED).tolist()
        return sorted(shortest, key=lambda t: JsonScan.bound(self.feed(state, [t])))

    def search(self, matcher: Matcher, state: State, limit: int,
               budget: int = SEARCH_BUDGET) -> list[int] | None:
        """A path of at most `limit` tokens to a complete text: greedy's if it fits, else
        the shortest the A* search finds (see the module's doc); None if none is found
        within `budget` expanded states. The matcher is left as it was."""
        found = self.greedy(matcher, state, limit)
        if found is not None:
            return found
        heap: list[tuple[int, int, int, tuple[int, ...], State]] = [
            (JsonScan.bound(state), 0, 0, (), state)]
        at: tuple[int, ...] = ()  # where the matcher is, after the start
        seen: set[bytes] = {b""}  # texts reached: one tokenization of a text is enough
        pushed = 0
        while heap and budget > 0:
            _, _, _, path, node = heapq.heappop(heap)
            budget -= 1
            _move(matcher, at, path)
            at = path
            for edge, child, done in self._children(matcher, node):
                length, bound = len(path) + len(edge), JsonScan.bound(child)
                if done and length <= limit:
                    matcher.rollback(len(at))
                    return [*path, *edge]
                text = b"".join(self.vocabulary.tokens[t] for t in (*path, *edge))
                if done or text in seen or length + bound > limit:
                    continue
                seen.add(text)
                pushed += 1
                heapq.heappush(heap, (length + bound, -length, pushed,
                                      (*path, *edge), child))
        matcher.rollback(len(at))
        return None

    def _children(self, matcher: Matcher, node: State
                  ) -> list[tuple[list[int], State, bool]]:
        """A search's distinct moves from the matcher's state (at `node`): each move, the
        scan after it and whether the text is then complete; at most CHILDREN, pruned
        as the module's doc says. Told apart by the scan after them (a digit among
        digits is one move); inside a string (or a grammar that is not JSON) by the
        next mask and forced bytes too; inside a key each letter is its own (`"b` and
        `"z` may share a mask, `eta"` and `ed"` to come)."""
        children: list[tuple[list[int], State, bool]] = []
        keys: set[tuple[State, bytes, bytes]] = set()
        for edge in self._edges(matcher, node):
            taken = matcher.try_consume_tokens(edge)
            if taken == len(edge):
                child = self.feed(node, edge)
                key = ((child, matcher.state_key(), matcher.compute_ff_bytes())
                       if node[1] in ("S", "X") else (child, b"", b""))
                if node[1] == "Q" or key not in keys:  # keys' letters: each its own
                    keys.add(key)
                    children.append((edge, child, matcher.is_accepting()))
            matcher.rollback(taken)
            if len(children) == CHILDREN:
                break
        if not self.json:
            return children
        closing = [c for c in children if len(c[1][0]) < len(node[0]) or c[2]]
        moving = [c for c in children if c[1] != node]
        # where the innermost bracket may close, more items only make the text longer;
        # a string's or number's further bytes only where nothing else is allowed
        return closing or moving or children

    def _edges(self, matcher: Matcher, state: State) -> list[list[int]]:
        """A search's moves from a state: the grammar's forced tokens as one move (a
        required key's name costs its tokens, not a state each), else single tokens."""
        if matcher.compute_ff_bytes():
            forced = matcher.compute_ff_tokens()
            if forced:
                return [[int(t) for t in forced]]
        mask = matcher.allowed()
        if self.json:  # JSON never needs a space: paths with them only repeat others
            mask[self.spaces] = False
        singles = [t for _, t in self._ordered(state) if mask[t]][:EXAMINED]
        return [[t] for t in dict.fromkeys([*singles, *self._shortest(mask, state)])]


_completers: dict[tuple[str, bool], Completer] = {}


def completer(vocabulary: Vocabulary, json: bool) -> Completer:
    """The vocabulary's completer (its candidate orders kept across rows and calls)."""
    key = (vocabulary.digest, json)
    if key not in _completers:
        _completers[key] = Completer(vocabulary, json)
    return _completers[key]


def _move(matcher: Matcher, at: tuple[int, ...], to: tuple[int, ...]) -> None:
    """Move the matcher from after `at` to after `to` (both paths from one state)."""
    same = 0
    while same < min(len(at), len(to)) and at[same] == to[same]:
        same += 1
    matcher.rollback(len(at) - same)
    matcher.consume_tokens(list(to[same:]))
