"""The engine's admission counts what a constrained row holds (issue 47, ADR 047): rows
join while the constrained rows' documented bytes stay within constraint_memory_mb, with
the answers they give all at once; a row that alone would pass it is refused before any
forward, naming its prompt, its bytes and the budget."""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import pytest

from dinfer_engine import Engine, generation, uniform_generation
from dinfer_engine.batch import Request
from dinfer_engine.constraints.spec_errors import ConstraintTooLarge
from dinfer_engine.row_budget import MB, RowBudget, joiners
from tests.constraints.test_structured_diffusion_gemma import SPECS as GEMMA_SPECS
from tests.constraints.test_structured_diffusion_gemma import config as gemma_config
from tests.constraints.test_structured_diffusion_gemma import prompt_ids
from tests.constraints.test_structured_outputs import PROMPTS, SPECS, check_all_valid, config
from tests.engine_requests import asked
from tests.json_models import write_json_diffusion_gemma, write_json_model

CONSTRAINED = [i for i, spec in enumerate(SPECS) if spec is not None]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("llada")))


def costs(engine: Engine, block_length: int) -> list[int]:
    budget = RowBudget(block_length, 0)
    return [budget.cost(Request(0, [], None, constraint=None if spec is None
                                else engine.compile(spec))) for spec in SPECS]


def most_constrained_at_once(engine: Engine, monkeypatch: pytest.MonkeyPatch,
                             **fields: object) -> tuple[list[list[int]], int]:
    """The token ids of every prompt (sampled, one seed each) and the most constrained
    rows that ran together, under config(**fields)."""
    seen = [0]
    admit = generation.admit

    def counting(batch, waiting, cfg, budget, sampled):  # type: ignore[no-untyped-def]
        admit(batch, waiting, cfg, budget, sampled)
        assert budget.held(batch.requests) <= budget.budget or batch.size == 1
        seen[0] = max(seen[0], sum(r.constraint is not None for r in batch.requests))

    monkeypatch.setattr(generation, "admit", counting)
    cfg = config(temperature=0.8, block_length=8, **fields)
    results = engine.generate(asked(PROMPTS, seeds=list(range(len(PROMPTS))), constraints=SPECS),
                              cfg)
    check_all_valid(results, SPECS)
    return [r.token_ids for r in results], seen[0]


def test_the_budget_splits_constrained_rows_with_the_answers_of_one_batch(engine,
                                                                          monkeypatch):
    together, at_once = most_constrained_at_once(engine, monkeypatch)
    assert at_once == len(CONSTRAINED)
    budget_mb = math.ceil(2.5 * max(costs(engine, 8)) / MB)  # two rows fit, never four
    split, at_once = most_constrained_at_once(engine, monkeypatch,
                                              constraint_memory_mb=budget_mb)
    assert 2 <= at_once < 4
    assert split == together


def test_a_row_that_alone_passes_the_budget_is_refused_before_any_forward(engine,
                                                                          monkeypatch):
    monkeypatch.setattr(generation, "step", lambda *a: pytest.fail("a forward ran"))
    budget_mb = math.ceil(min(c for c in costs(engine, 16) if c) / MB) - 1
    with pytest.raises(ConstraintTooLarge) as refused:
        engine.generate(asked(PROMPTS, constraints=SPECS), config(constraint_memory_mb=budget_mb))
    assert sorted(refused.value.errors) == CONSTRAINED
    reason = refused.value.errors[CONSTRAINED[0]]
    assert "constraint_memory_mb" in reason and "block_length" in reason
    assert f"budget of {budget_mb:,} MB" in reason


def test_free_rows_cost_nothing_and_one_row_always_runs(engine):
    grammar = engine.compile(SPECS[0])  # type: ignore[arg-type]
    budget = RowBudget(16, 0)
    cost = budget.grammar_cost(grammar)
    free, tied = (Request(0, [1], None), Request(1, [1], None, constraint=grammar))
    budget = dataclasses.replace(budget, budget=2 * cost)

    def join(waiting, running, rows, row_budget):  # type: ignore[no-untyped-def]
        """joiners() over rows one column wide, at most `rows` of them."""
        cfg = engine.resolve_config(config(max_batch_size=rows))
        return joiners(waiting, running, 1, lambda _request: 1, cfg, row_budget)

    waiting = deque([tied, free, tied, free, tied, free])
    assert join(waiting, [], 64, budget) == [tied, free, tied, free]
    assert join(waiting, [], 64, dataclasses.replace(budget, budget=cost - 1)) == [tied]
    assert join(deque([free] * 5), [tied, tied], 4, budget) == [free, free]


def test_diffusion_gemma_admits_by_the_budget_with_the_answers_of_one_batch(tmp_path,
                                                                            monkeypatch):
    engine = Engine.from_pretrained(write_json_diffusion_gemma(tmp_path / "gemma"))
    specs = [GEMMA_SPECS[0], None, GEMMA_SPECS[4], GEMMA_SPECS[-1], None]
    seeds = list(range(len(specs)))
    prompts = [prompt_ids(seed) for seed in seeds]
    together = engine.generate(asked(prompts, seeds=seeds, constraints=specs), gemma_config())
    budget = RowBudget.of(engine.model, engine.resolve_config(gemma_config()))
    most = max(budget.cost(Request(0, [], None, constraint=engine.compile(spec)))
               for spec in specs if spec is not None)
    seen: list[int] = []
    real = uniform_generation.joiners

    def counting(waiting, present, *rest):  # type: ignore[no-untyped-def]
        joining = real(waiting, present, *rest)
        seen.append(sum(r.constraint is not None for r in [*present, *joining]))
        return joining

    monkeypatch.setattr(uniform_generation, "joiners", counting)
    cfg = gemma_config(constraint_memory_mb=math.ceil(1.5 * most / MB))  # one row at once
    split = engine.generate(asked(prompts, seeds=seeds, constraints=specs), cfg)
    assert max(seen) == 1
    assert [r.token_ids for r in split] == [r.token_ids for r in together]
