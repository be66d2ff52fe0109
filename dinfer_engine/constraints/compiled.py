"""An engine's compiled constraints by spec digest: grammars, and the reasons of those
that cannot compile, remembered alike, so a constraint is compiled at most once per
process however many lines, batches, chunks or retries in halves ask for it. The cache
is bounded by the grammars' estimated bytes (least recently used evicted first); each
compile's own time and memory are bounded by llguidance's parser limits
(spec.parser_limits)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dinfer_engine.constraints.grammar import Grammar, compile_grammar
from dinfer_engine.constraints.spec import ConstraintError, ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintFailures
from dinfer_engine.constraints.vocabulary import Vocabulary

log = logging.getLogger(__name__)

MB = 2**20
REASON_BYTES = 200  # a remembered failure's key and bookkeeping, beyond its text


@dataclass(frozen=True)
class CompileLimits:
    """What an engine's compiled grammars may hold (estimated bytes)."""

    cache_bytes: int = 1024 * MB


class CompiledConstraints:
    def __init__(self, vocabulary: Callable[[], Vocabulary],
                 limits: CompileLimits | None = None) -> None:
        """vocabulary: makes the model's vocabulary, on the first compile."""
        self.make_vocabulary = vocabulary
        self._vocabulary: Vocabulary | None = None
        self.limits = limits or CompileLimits()
        self.compiles = 0  # compile attempts, successful or not
        self.bytes = 0  # estimated, of what is kept
        self._kept: OrderedDict[str, tuple[Grammar | str, int]] = OrderedDict()

    def error(self, spec: ConstraintSpec) -> str | None:
        """Why the spec cannot compile, if that is known; compiles nothing."""
        entry = self._kept.get(spec.digest)
        return entry[0] if entry is not None and isinstance(entry[0], str) else None

    @property
    def vocabulary(self) -> Vocabulary:
        if self._vocabulary is None:
            self._vocabulary = self.make_vocabulary()
        return self._vocabulary

    def get(self, spec: ConstraintSpec) -> Grammar:
        """The spec's grammar, compiled on first use; ConstraintError with the reason,
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
            grammar = compile_grammar(spec, self.vocabulary)
            if grammar.bytes > self.limits.cache_bytes:
                raise ConstraintError(
                    f"its grammar takes about {grammar.bytes / MB:,.1f} MB, more than the "
                    f"constraint cache's budget of {self.limits.cache_bytes / MB:,.1f} MB; "
                    "simplify the constraint")
        except ConstraintError as exc:
            log.warning("constraint %s (%s) cannot be compiled, remembered: %s",
                        digest[:12], spec.kind, exc)
            self._keep(digest, str(exc), REASON_BYTES + len(str(exc)))
            raise
        log.info("compiled constraint %s (%s) in %.1f ms: ~%.2f MB", digest[:12], spec.kind,
                 (time.perf_counter() - started) * 1e3, grammar.bytes / MB)
        self._keep(digest, grammar, grammar.bytes)
        return grammar

    def reason(self, spec: ConstraintSpec) -> str | None:
        """Why the spec cannot compile, or None, compiling it if that is not known yet."""
        try:
            self.get(spec)
        except ConstraintError as exc:
            return str(exc)
        return None

    def for_prompts(self, specs: Sequence[ConstraintSpec | None]) -> list[Grammar | None]:
        """Each prompt's grammar (None: a free prompt); ConstraintFailures naming every
        prompt whose constraint cannot be compiled. Whether a prompt may be constrained
        at all is dinfer_engine/request_check.py's to say, before."""
        grammars: list[Grammar | None] = []
        failed: dict[int, str] = {}
        for index, spec in enumerate(specs):
            reason = None if spec is None else self.reason(spec)
            if reason is not None:
                failed[index] = reason
            grammars.append(None if spec is None or reason is not None else self.get(spec))
        if failed:
            raise ConstraintFailures(failed)
        return grammars

    def _keep(self, digest: str, entry: Grammar | str, size: int) -> None:
        self._kept[digest] = (entry, size)
        self.bytes += size
        while self.bytes > self.limits.cache_bytes and len(self._kept) > 1:
            _, (_, evicted) = self._kept.popitem(last=False)
            self.bytes -= evicted
