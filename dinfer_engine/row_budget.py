"""What the constrained rows decoded together may hold (docs/adr/047-constrained-row-admission.md).

A constrained row costs its documented bytes (decoding/slices.constrained_row_bytes over
the positions whose logits it holds per iteration, with its grammar's estimate); rows
join a run while the sum over the constrained rows in it stays within
constraint_memory_mb, beside max_batch_size and max_batch_tokens. A free row costs
nothing here: its logits are what max_batch_tokens bounds. A row that alone would pass
the budget is refused before any forward (ConstraintTooLarge), so it fails alone."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
