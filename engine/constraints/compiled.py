"""An engine's compiled constraints by spec digest: automata, and the reasons of those
that cannot compile, remembered alike, so a constraint is compiled at most once per
process however many lines, batches, chunks or retries in halves ask for it. The cache
is bounded by the automata's estimated bytes (least recently used evicted first), and
each compile runs in a child under a time and a memory limit (limited.py)."""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable

from engine.constraints.automaton import TokenAutomaton
from engine.constraints.limited import MB, CompileLimits
from engine.constraints.spec import ConstraintError, ConstraintSpec

log = logging.getLogger(__name__)

ENTRY_BYTES = 56  # a transition's key and value ints in a state's dict
REASON_BYTES = 200  # a remembered failure's key and bookkeeping, beyond its text


Compile = Callable[[ConstraintSpec, CompileLimits], TokenAutomaton]


class CompiledConstraints:
    def __init__(self, limits: CompileLimits | None = None) -> None:
        self.limits = limits or CompileLimits()
        self.compiles = 0  # compile attempts, successful or not
        self.bytes = 0  # estimated, of what is kept
        self._kept: OrderedDict[str, tuple[TokenAutomaton | str, int]] = OrderedDict()

    def error(self, spec: ConstraintSpec) -> str | None:
        """Why the spec cannot compile, if that is known; compiles nothing."""
        entry = self._kept.get(spec.digest)
        return entry[0] if entry is not None and isinstance(entry[0], str) else None

    def get(self, spec: ConstraintSpec, compile: Compile, vocabulary: int) -> TokenAutomaton:
        """The spec's automaton, compiled on first use; ConstraintError with the reason,
        the same each time, for one that cannot be."""
        digest = spec.digest
        if digest in self._kept:
            self._kept.move_to_end(digest)
            kept = self._kept[digest][0]
            if isinstance(kept, str):
                raise ConstraintError(kept)
            return kept
        self.compiles += 1
        started = time.perf_counter()
        try:
            automaton = compile(spec, self.limits)
            size = automaton_bytes(automaton, vocabulary)
            if size > self.limits.cache_bytes:
                raise ConstraintError(
                    f"its automaton takes about {size / MB:,.0f} MB, more than the constraint "
                    f"cache's budget of {self.limits.cache_bytes / MB:,.0f} MB; simplify the "
                    "constraint")
        except ConstraintError as exc:
            log.warning("constraint %s (%s) cannot be compiled, remembered: %s",
                        digest[:12], spec.kind, exc)
            self._keep(digest, str(exc), REASON_BYTES + len(str(exc)))
            raise
        log.info("compiled constraint %s (%s) in %.1f s: %d states, ~%.1f MB", digest[:12],
                 spec.kind, time.perf_counter() - started, automaton.states, size / MB)
        self._keep(digest, automaton, size)
        return automaton

    def _keep(self, digest: str, entry: TokenAutomaton | str, size: int) -> None:
        self._kept[digest] = (entry, size)
        self.bytes += size
        while self.bytes > self.limits.cache_bytes and len(self._kept) > 1:
            _, (_, evicted) = self._kept.popitem(last=False)
            self.bytes -= evicted


def automaton_bytes(automaton: TokenAutomaton, vocabulary: int) -> int:
    """Estimated bytes of an automaton and of what decoding derives from it on one device:
    its tensors (twice: a device's copy), its transition dicts, and its token sets'
    membership table (block_dp.SetTables: sets x vocabulary booleans)."""
    tensors = sum(t.numel() * t.element_size() for t in (
        automaton.src, automaton.dst, automaton.pair_set, automaton.set_tokens,
        automaton.set_of_entry, automaton.distance))
    rows = sum(sys.getsizeof(row) + len(row) * ENTRY_BYTES for row in automaton.next_state)
    return 2 * tensors + rows + sys.getsizeof(automaton.next_state) \
        + automaton.sets * vocabulary
