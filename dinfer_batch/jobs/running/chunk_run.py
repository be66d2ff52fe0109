"""A chunk's engine work, as one object: the engine, the job, where results go (the
writer), what it counted (the metrics) and what bounds it (the deadline, a worker
stopping). `generate` makes one engine call for a batch of the chunk's items; a call that
fails runs its unfinished items again in halves until the culprit is alone, and it alone
fails. Bounded work: each batch's constraints are compiled ahead of its call (an item
whose constraint cannot compile fails without an engine call, never a retry in halves);
past the chunk's deadline its remaining items fail."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from dinfer_batch.formats.lines.prompts import draws, row_seeds
from dinfer_batch.formats.lines.requests import render_prompts
from dinfer_batch.formats.parameters.params import engine_fields, row_controls, row_fields
from dinfer_batch.formats.results.output import item_outcome
from dinfer_batch.jobs.running.cache_scopes import line_scope
from dinfer_batch.jobs.running.chunk_bounds import (
    DEADLINE_CODE,
    TOO_LARGE_CODE,
    Bounds,
    PastDeadline,
    constraint_errors,
)
from dinfer_batch.jobs.running.chunk_state import ChunkMetrics
from dinfer_batch.jobs.running.result_writer import ResultWriter
from dinfer_batch.storage.retry import DatabaseDown
from dinfer_batch.storage.tables import Item, Job
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintFailures, ConstraintTooLarge
from dinfer_engine.infill import Prompt
from dinfer_engine.request import GenerationRequest
from dinfer_engine.result import GenerationResult
from dinfer_workers.engine_cache import (
    RankFailure,
    WorkerEngine,
    generation_config,
)

log = logging.getLogger(__name__)


class Stopping(Exception):
    """The worker is stopping warm: leave the engine call at the next finished request."""


@dataclass(frozen=True)
class Line:
    """A pending item and its effective parameters (the job's defaults under the line's
    own), worked out once per chunk run."""

    item: Item
    params: dict[str, Any]

    @classmethod
    def of(cls, defaults: dict[str, Any], item: Item) -> Line:
        return cls(item, defaults | (item.request or {})["params"])


def items(lines: list[Line]) -> list[Item]:
    return [line.item for line in lines]


@dataclass
class _Call:
    """One engine call's rows: each item's prompts x draws (`n`, or `best_of`) are rows
    with seeds seed, seed+1, ... per prompt (the engine draws each row's noise from its
    own seed alone; formats/lines/prompts.py), and what has landed of them."""

    batch: list[Line]
    specs: list[ConstraintSpec | None]
    seeds: list[list[int]]  # each item's, one per row
    rows: list[tuple[int, int]]  # (item index, row of the item)
    landed: dict[int, dict[int, GenerationResult]] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)  # item indices with every sample

    @classmethod
    def of(cls, job: Job, batch: list[Line], account: str) -> _Call:
        """Constraints compile per account too, so no owner learns of another's schemas
        from a compile cache's hits (docs/adr/040-prefix-cache-owners.md)."""
        specs = [None if "structured" not in line.params else
                 replace(ConstraintSpec.from_dict(line.params["structured"]), scope=account)
                 for line in batch]
        seeds = [row_seeds(line.item.request or {}, line.params, job.seed_base, line.item.line)
                 for line in batch]
        rows = [(index, sample) for index, item_seeds in enumerate(seeds)
                for sample in range(len(item_seeds))]
        return cls(batch, specs, seeds, rows)

    def requests(self, prompts: Sequence[Sequence[Prompt]], account: str
                 ) -> list[GenerationRequest]:
        """The engine's requests, one per row (a prompt's draw): each carries its line's
        per-row values (dinfer_batch.formats.parameters.params.PER_REQUEST), so lines differing only
        in them share the call."""
        return [GenerationRequest(prompts[index][sample // draws(self.batch[index].params)],
                                  seed=self.seeds[index][sample],
                                  constraint=self.specs[index],
                                  scope=line_scope(account, self.batch[index].params),
                                  controls=row_controls(self.batch[index].params),
                                  fields=row_fields(self.batch[index].params))
                for index, sample in self.rows]

    def land(self, row: int, result: GenerationResult) -> int | None:
        """Keep a row's result; the item's index once all its samples have landed."""
        index, sample = self.rows[row]
        samples = self.landed.setdefault(index, {})
        samples[sample] = result
        if len(samples) < len(self.seeds[index]):
            return None
        self.finished.add(index)
        return index

    def unfinished(self, *also_done: dict[int, Any]) -> list[Line]:
        return [line for index, line in enumerate(self.batch) if index not in self.finished
                and not any(index in done for done in also_done)]


@dataclass
class ChunkRun:
    engine: WorkerEngine
    job: Job
    writer: ResultWriter
    metrics: ChunkMetrics
    bounds: Bounds
    account: str  # whose cached prompt blocks its prompts may reuse (jobs/running/cache_scopes.py)

    def generate(self, batch: list[Line], shared: dict[str, Any]) -> None:
        """One engine call for the batch (lines sharing `shared` parameters); results are
        written as they land. Raises Stopping once the worker is stopping (what landed is
        written first)."""
        call = _Call.of(self.job, batch, self.account)
        known = constraint_errors(self.engine, call.specs, self.bounds)
        if known is None:
            self.writer.fail(items(batch), DEADLINE_CODE, self.bounds.deadline_message())
        elif known:
            self._fail_constraints(batch, known)
            self._again(call.unfinished(known), shared)
        else:
            self._call(call, shared)

    def _again(self, lines: list[Line], shared: dict[str, Any]) -> None:
        if lines:
            self.generate(lines, shared)

    def _call(self, call: _Call, shared: dict[str, Any]) -> None:
        started = time.perf_counter()
        failure: Exception | None = None
        try:
            prompts = [render_prompts(line.item.request or {}, self.engine.tokenizer,
                                      line.params) for line in call.batch]
            self.engine.generate(call.requests(prompts, self.account),
                                 generation_config(engine_fields(shared)),
                                 on_result=partial(self._landed, call))
        except Stopping:
            self.writer.flush()
            raise
        except (SQLAlchemyError, DatabaseDown, RankFailure):  # not the requests' fault
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the engine raised, the chunk goes on
            failure = exc
        self.metrics.batch_sizes.append(len(call.batch))
        self.metrics.seconds += time.perf_counter() - started
        self.writer.send()  # written on the writer thread while the next call runs
        if failure is not None:
            self._recover(call, failure, shared)

    def _landed(self, call: _Call, row: int, result: GenerationResult) -> None:
        """The engine's callback for each finished row."""
        self.metrics.count(result)
        index = call.land(row, result)
        if index is not None:
            samples = call.landed[index]
            line = call.batch[index]
            self.writer.add(item_outcome(line.item.line,
                                         [samples[i] for i in range(len(samples))],
                                         line.item.request or {}, line.params,
                                         self.engine.tokenizer))
        if self.bounds.stopping.is_set():
            raise Stopping
        if self.bounds.past_deadline():
            raise PastDeadline

    def _recover(self, call: _Call, failure: Exception, shared: dict[str, Any]) -> None:
        """After a failed call: past the deadline the rest fails; constraints the engine
        refused before any forward (that cannot compile, or whose row alone would pass
        its constraint memory budget: `constraint_too_large`) fail and the call's other
        items run again together; anything else isolates the culprit."""
        if isinstance(failure, PastDeadline):
            self.writer.fail(items(call.unfinished()), DEADLINE_CODE,
                             self.bounds.deadline_message())
            return
        bad = {} if not isinstance(failure, ConstraintFailures) else {
            call.rows[row][0]: reason for row, reason in failure.errors.items()
            if row < len(call.rows)}
        if bad:
            self._fail_constraints(call.batch, bad, TOO_LARGE_CODE if isinstance(
                failure, ConstraintTooLarge) else "invalid_request")
            self._again(call.unfinished(bad), shared)
        else:
            self._isolate(failure, call.unfinished(), shared)

    def _isolate(self, failure: Exception, rest: list[Line], shared: dict[str, Any]) -> None:
        """One bad request fails the whole call: run the unfinished items again in halves
        until the culprit is alone; it alone fails (`invalid_request` for values the
        engine refused, else `engine_error`)."""
        if len(rest) > 1:
            log.warning("engine call on %d items failed (%s: %s); retrying them in halves",
                        len(rest), type(failure).__name__, failure)
            half = len(rest) // 2
            for part in (rest[:half], rest[half:]):
                self.generate(part, shared)
        elif isinstance(failure, ValueError):
            self.writer.fail(items(rest), "invalid_request", str(failure))
        else:
            self.writer.fail(items(rest), "engine_error", f"{type(failure).__name__}: {failure}")

    def _fail_constraints(self, batch: list[Line], errors: dict[int, str],
                          code: str = "invalid_request") -> None:
        """Fail the items at these indices of the batch, each with why its constraint
        cannot be honoured."""
        self.writer.fail_each([(batch[index].item, code,
                                f"structured output: {reason}")
                               for index, reason in errors.items()])
