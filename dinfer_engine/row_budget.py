"""What the constrained rows decoded together may hold (docs/adr/047-constrained-row-admission.md).

A constrained row costs its documented bytes (decoding/slices.constrained_row_bytes over
the positions whose logits it holds per iteration, with its grammar's estimate); rows
join a run while the sum over the constrained rows in it stays within
constraint_memory_mb, beside max_batch_size and max_batch_tokens. A free row costs
nothing here: its logits are what max_batch_tokens bounds. A row that alone would pass
the budget is refused before any forward (ConstraintTooLarge), so it fails alone.
`joiners` is the admission both generation loops use; they differ only in how wide a row
is."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dinfer_engine.decoding.slices import constrained_row_bytes

if TYPE_CHECKING:
    from dinfer_engine.batch import Request
    from dinfer_engine.constraints.grammar import Grammar
    from dinfer_engine.generation_config import ResolvedConfig
    from dinfer_engine.models.base import DiffusionLM

MB = 2**20


@dataclass(frozen=True)
class RowBudget:
    positions: int  # whose logits a row holds per iteration
    budget: int  # bytes, for all constrained rows at once

    @classmethod
    def of(cls, model: DiffusionLM, config: ResolvedConfig) -> RowBudget:
        return cls(model.logit_positions(config.block_length),
                   config.constraint_memory_mb * MB)

    def grammar_cost(self, grammar: Grammar) -> int:
        return constrained_row_bytes(grammar.vocabulary.size, self.positions, grammar.bytes)

    def cost(self, request: Request) -> int:
        return 0 if request.constraint is None else self.grammar_cost(request.constraint)

    def held(self, requests: Iterable[Request]) -> int:
        return sum(self.cost(request) for request in requests)

    def refusals(self, grammars: Sequence[Grammar | None]) -> dict[int, str]:
        """Index -> why that prompt's constrained row cannot run: it alone would hold
        more than the budget."""
        return {index: self.too_large(grammar) for index, grammar in enumerate(grammars)
                if grammar is not None and self.grammar_cost(grammar) > self.budget}

    def too_large(self, grammar: Grammar) -> str:
        return (f"a constrained row here needs about {self.grammar_cost(grammar) / MB:,.0f} MB "
                f"({self.positions} positions' logits per iteration over "
                f"{grammar.vocabulary.size:,} tokens, its masks and its grammar), more than "
                f"the engine's constraint memory budget of {self.budget / MB:,.0f} MB "
                "(constraint_memory_mb); use a smaller block_length, or raise "
                "constraint_memory_mb in the model's generation_config.json")


def joiners(waiting: deque[Request], running: Sequence[Request], width: int,
            row_width: Callable[[Request], int], config: ResolvedConfig,
            budget: RowBudget) -> list[Request]:
    """The waiting rows that join the running ones, in queue order, taken from `waiting`:
    while rows stay within max_batch_size, rows x width within max_batch_tokens (the
    widest of the running rows' `width`, 0 when none run, and each joiner's `row_width`),
    and the constrained rows' bytes within the budget. The first row that does not fit
    stops the joining (queue order is kept); one row always runs."""
    joining: list[Request] = []
    held = budget.held(running)
    while waiting and len(running) + len(joining) < config.max_batch_size:
        new_width = max(width, row_width(waiting[0]))
        rows, cost = len(running) + len(joining) + 1, budget.cost(waiting[0])
        if rows > 1 and (rows * new_width > config.max_batch_tokens
                         or held + cost > budget.budget):
            break
        joining.append(waiting.popleft())
        width, held = new_width, held + cost
    return joining
