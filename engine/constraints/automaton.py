"""A constraint compiled into an automaton over the model's token vocabulary.

outlines-core turns the spec's regular expression into a DFA over tokens (which tokens
may follow from each state, and where they lead: docs/adr/019-structured-outputs.md).
Two states are added: stop tokens lead from every accepting state to `done`, and from
`done` only stop tokens follow, so an answer ends only where its text is complete and
everything after its end is a stop token.

For the block dynamic programme (engine/constraints/block_dp.py) the transitions are
kept as state pairs (src -> dst), each with the id of its token set: many pairs share one
set (every string field allows the same characters), so a step reduces each distinct set
once. `distance[q]` is the fewest tokens from q to `done`.

Compiling runs in a forked child with a time and a memory limit, so a hostile schema
cannot stall the worker or exhaust its memory; the automaton's size is limited too
(MAX_TRANSITIONS)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from engine.constraints.limited import COMPILE_SECONDS, run_limited
from engine.constraints.spec import ConstraintError, ConstraintSpec

MAX_TRANSITIONS = 20_000_000  # (state, token) pairs of the token-level DFA
UNREACHABLE = 1 << 30
CANNOT_SPELL = ("the model's vocabulary cannot spell any text the constraint accepts (a "
                "character that no token holds?)")


@dataclass
class TokenAutomaton:
    initial: int
    done: int  # the state after a stop token; also the number of other states
    next_state: list[dict[int, int]]  # per state: token -> state
    src: torch.Tensor  # [P] state pairs with at least one token between them
    dst: torch.Tensor  # [P]
    pair_set: torch.Tensor  # [P] the token set of each pair
    set_tokens: torch.Tensor  # [N] every set's tokens, set after set
    set_of_entry: torch.Tensor  # [N] which set each entry belongs to
    sets: int
    distance: torch.Tensor  # [states] fewest tokens to `done` (UNREACHABLE if none)
    # per device: this automaton there, and tables derived from it (block_dp.SetTables)
    _on: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def states(self) -> int:
        return self.done + 1

    def to(self, device: torch.device) -> TokenAutomaton:
        """This automaton with its tensors on `device` (made once per device)."""
        if self.src.device == device:
            return self
        if str(device) not in self._on:
            moved = {name: getattr(self, name).to(device) for name in
                     ("src", "dst", "pair_set", "set_tokens", "set_of_entry", "distance")}
            self._on[str(device)] = TokenAutomaton(
                self.initial, self.done, self.next_state, sets=self.sets, **moved)
        return self._on[str(device)]

    def walk(self, state: int, tokens: list[int]) -> int:
        """The state after `tokens`; -1 if the automaton refuses one."""
        for token in tokens:
            state = self.next_state[state].get(token, -1)
            if state < 0:
                return -1
        return state

    def __getstate__(self) -> dict[str, Any]:  # sent to tensor-parallel ranks without copies
        return {k: v for k, v in self.__dict__.items() if k != "_on"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _on={})


def compile_automaton(spec: ConstraintSpec, tokens: dict[int, bytes], stop_ids: list[int],
                      seconds: float = COMPILE_SECONDS, memory_bytes: int | None = None
                      ) -> TokenAutomaton:
    """The spec's automaton over `tokens` (id -> bytes spelled; token_bytes()), stop_ids
    being the tokens that end an answer, compiled within `seconds` and `memory_bytes`.
    ConstraintError for a spec that cannot be compiled: unsupported, unspellable with
    these tokens, too large, too slow or past the memory limit."""
    payload = run_limited(_tables, (spec.to_regex(), tokens, stop_ids), seconds, spec.kind,
                          memory_bytes)
    initial, done, next_state, *arrays, sets, distance = payload
    src, dst, pair_set, set_tokens, set_of_entry = map(torch.from_numpy, arrays)
    return TokenAutomaton(initial, done, next_state, src, dst, pair_set, set_tokens,
                          set_of_entry, sets, torch.from_numpy(distance))


def _tables(regex: str, tokens: dict[int, bytes], stop_ids: list[int]) -> tuple[Any, ...]:
    """The automaton's plain tables (built in the child, then pickled to the parent).

    outlines-core's index leaves out tokens that pass through a state where the whole
    expression matches and go on (after "a", "b" in (ab|b)*a): the regular expression is
    given a final NUL byte, spelled by a token of its own, and the states that may read
    that token are the accepting ones."""
    from outlines_core import Index, Vocabulary

    by_bytes: dict[bytes, list[int]] = {}
    for token, spelled in tokens.items():
        if token not in stop_ids and b"\0" not in spelled:
            by_bytes.setdefault(spelled, []).append(token)
    end = max([*tokens, *stop_ids]) + 1
    by_bytes[b"\0"] = [end]
    try:
        index = Index(f"(?:{regex})\\x00", Vocabulary(stop_ids[0], by_bytes))
    except ValueError as exc:
        if "incompatible with the regex" in str(exc):  # outlines-core's wording
            raise ConstraintError(CANNOT_SPELL) from exc
        raise
    transitions = index.get_transitions()
    accepting = [name for name, row in transitions.items() if end in row]
    if sum(map(len, transitions.values())) > MAX_TRANSITIONS:
        raise ConstraintError(f"the automaton has more than {MAX_TRANSITIONS} transitions "
                              "(the limit); simplify the constraint")
    names = sorted({index.get_initial_state(), *transitions,
                    *(s for row in transitions.values() for s in row.values())})
    number = {name: i for i, name in enumerate(names)}
    done = len(names)
    stops = set(stop_ids)
    next_state: list[dict[int, int]] = [{} for _ in range(done + 1)]
    for name, row in transitions.items():
        next_state[number[name]] = {t: number[s] for t, s in row.items()
                                    if t not in stops and t != end}
    for name in accepting:
        next_state[number[name]].update(dict.fromkeys(stop_ids, done))
    next_state[done] = dict.fromkeys(stop_ids, done)
    initial, distance = number[index.get_initial_state()], _distances(next_state)
    if distance[initial] == UNREACHABLE:
        raise ConstraintError(CANNOT_SPELL)
    return (initial, done, next_state, *_pairs(next_state), distance)


def _pairs(next_state: list[dict[int, int]]) -> tuple[Any, ...]:
    """Group each state's tokens by where they lead, and share equal token sets: src, dst,
    pair_set, set_tokens, set_of_entry, sets."""
    set_ids: dict[tuple[int, ...], int] = {}
    src, dst, pair_set = [], [], []
    for state, row in enumerate(next_state):
        by_target: dict[int, list[int]] = {}
        for token, target in row.items():
            by_target.setdefault(target, []).append(token)
        for target, members in by_target.items():
            key = tuple(sorted(members))
            src.append(state)
            dst.append(target)
            pair_set.append(set_ids.setdefault(key, len(set_ids)))
    entries = [np.asarray(key, dtype=np.int64) for key in set_ids]
    set_tokens = np.concatenate(entries) if entries else np.zeros(0, dtype=np.int64)
    set_of_entry = np.repeat(np.arange(len(entries), dtype=np.int64),
                             [len(e) for e in entries])
    return (np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(pair_set, dtype=np.int64), set_tokens, set_of_entry, len(entries))


def _distances(next_state: list[dict[int, int]]) -> Any:
    """Fewest tokens from each state to `done`, the last state (breadth first over the
    reversed transitions)."""
    done = len(next_state) - 1
    into: list[set[int]] = [set() for _ in range(done + 1)]
    for state, row in enumerate(next_state):
        for target in set(row.values()):
            into[target].add(state)
    distance = [UNREACHABLE] * (done + 1)
    distance[done] = 0
    queue = deque([done])
    while queue:
        state = queue.popleft()
        for before in into[state]:
            if distance[before] == UNREACHABLE:
                distance[before] = distance[state] + 1
                queue.append(before)
    return np.asarray(distance, dtype=np.int64)
