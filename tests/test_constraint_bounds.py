"""Constraint compiles are bounded (engine/constraints/compiled.py, limited.py): a
constraint that cannot compile is compiled once and its reason remembered; the compiled
automata kept are bounded by bytes; a compile past its child's memory limit fails
cleanly, naming the limit; at submit, a batch's distinct JSON schemas are expanded only
within its budget (formats/structured.py). Real compiles over a real tokenizer."""

from __future__ import annotations

import json

import pytest

from dinfer_batch.formats.limits import InvalidParam
from dinfer_batch.formats.structured import SubmitBudget, budgeted, checked
from engine import Engine, GenerationConfig
from engine.constraints import spec as spec_module
from engine.constraints.compiled import CompiledConstraints, automaton_bytes
from engine.constraints.limited import MB, CompileLimits
from engine.constraints.spec import ConstraintSpec
from engine.constraints.spec_errors import ConstraintError, ConstraintFailures
from tests.json_models import write_json_model

# neighbours of the issue's `[01]*1[01]{17}é`: automata of 2^k states, and a character
# ('Q', '~') that the JSON models' vocabulary cannot spell
UNSPELLABLE = ["[ab]*a[ab]{7}Q", "[xy]*y[xy]{5}~"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("m") / "llada"))


def config() -> GenerationConfig:
    return GenerationConfig(gen_length=16, block_length=8, steps=8, decoder="threshold",
                            threshold=0.5)


@pytest.mark.parametrize("pattern", UNSPELLABLE)
def test_a_constraint_that_cannot_compile_is_compiled_once_and_its_reason_remembered(
        engine, pattern):
    bad, good = ConstraintSpec.regex(pattern), ConstraintSpec.regex(f"[a-c]{{2}}{pattern[1]}")
    before = engine.constraints.compiles
    for prompts in (["a", "b", "c"], ["d", "e"], ["f", "g", "h"]):
        specs = [bad, good, bad][:len(prompts)]
        with pytest.raises(ConstraintFailures) as failed:
            engine.generate(prompts, config(), constraints=specs)
        assert set(failed.value.errors) == {i for i, s in enumerate(specs) if s is bad}
        assert all("cannot spell" in reason for reason in failed.value.errors.values())
    assert engine.constraints.compiles == before + 2  # the bad one once, the good one once
    assert engine.constraint_error(bad) == failed.value.errors[0]
    assert engine.constraint_error(good) is None
    # the good constraint still runs; nothing more compiles
    [result] = engine.generate(["x"], config(), constraints=[good])
    assert engine.constraints.compiles == before + 2 and len(result.text) <= 3


def test_the_cache_is_bounded_by_bytes_and_evicts_the_least_recently_used(engine):
    specs = [ConstraintSpec.regex(f"[ab]*a[ab]{{{k}}}") for k in (6, 7, 8)]
    sizes = [automaton_bytes(engine.compile(s), 64) for s in specs]
    assert sizes[0] < sizes[1] < sizes[2]  # twice the states each time
    kept = CompiledConstraints(CompileLimits(cache_bytes=sizes[1] + sizes[2]))
    original, engine.constraints = engine.constraints, kept
    try:
        for spec in specs:
            engine.compile(spec)
        assert kept.bytes <= sizes[1] + sizes[2] and kept.compiles == 3
        engine.compile(specs[2])
        engine.compile(specs[1])  # both kept: no compile
        assert kept.compiles == 3
        engine.compile(specs[0])  # evicted, compiled again; evicts the oldest, specs[2]
        assert kept.compiles == 4 and kept.bytes <= sizes[1] + sizes[2]
        engine.compile(specs[1])
        assert kept.compiles == 4
        # one that alone is larger than the budget fails, and is remembered
        large = ConstraintSpec.regex("[ab]*a[ab]{11}")
        for _ in range(2):
            with pytest.raises(ConstraintError, match=r"more than the constraint cache's "
                                                      r"budget of \d+ MB"):
                engine.compile(large)
        assert kept.compiles == 5 and kept.error(large) is not None
    finally:
        engine.constraints = original


def test_a_compile_past_its_memory_limit_fails_cleanly_naming_the_limit(engine):
    limited = CompiledConstraints(CompileLimits(memory_bytes=24 * MB))
    original, engine.constraints = engine.constraints, limited
    try:
        big = ConstraintSpec.regex("[01]*0[01]{16}")  # ~130k states: far past 24 MB
        with pytest.raises(ConstraintFailures, match="memory limit of 24 MB per compile"):
            engine.generate(["a"], config(), constraints=[big])
        [result] = engine.generate(["a"], config(), constraints=[
            ConstraintSpec.regex("[0-9]{3}")])  # the same limit, a small automaton
        assert result.finish_reason == "stop" and len(result.text) == 3
        assert limited.compiles == 2
    finally:
        engine.constraints = original


def schema(index: int) -> dict:
    return {"type": "object", "properties": {
        "pick": {"enum": [f"v{index}-{value}" for value in range(40)]}}, "required": ["pick"]}


def test_a_batchs_distinct_schemas_are_expanded_within_its_budget():
    expansions = spec_module._regex.cache_info().misses
    budget = SubmitBudget(schemas=5, seconds=60)
    with budgeted(budget):
        for index in range(30):  # each twice: a repeat costs nothing
            for _ in range(2):
                assert checked(ConstraintSpec.json_schema(schema(1000 + index)), "f")[
                    "kind"] == "json_schema"
        # past the budget the checks that need no child still refuse what they can
        with pytest.raises(InvalidParam, match="keyword 'uniqueItems' is not supported"):
            checked(ConstraintSpec.json_schema({"type": "array", "uniqueItems": True}), "f")
        # a regex is never expanded: always checked whole
        with pytest.raises(InvalidParam, match="look-around"):
            checked(ConstraintSpec.regex("a(?=b)"), "f")
    assert spec_module._regex.cache_info().misses - expansions == 5 + 1  # + the regex
    assert len(budget.expanded) == 5
    # outside a budget (a job's options, the command line) every schema is expanded
    with pytest.raises(InvalidParam, match="expands to a"):
        checked(ConstraintSpec.json_schema(optional_properties(70)), "f")


def optional_properties(count: int) -> dict:
    """A small schema whose regular expression grows with the square of `count`."""
    return {"type": "object", "properties": {f"p{i}": {"type": "string"}
                                             for i in range(count)}}


def test_a_budget_of_seconds_stops_expansions_once_spent():
    budget = SubmitBudget(schemas=1000, seconds=0.000_001)
    with budgeted(budget):
        for index in range(4):
            checked(ConstraintSpec.json_schema(schema(2000 + index)), "f")
    assert len(budget.expanded) == 1 and budget.spent > budget.seconds


def test_an_expansion_failure_is_remembered():
    huge = ConstraintSpec.json_schema(optional_properties(64))
    before = spec_module._regex.cache_info()
    for _ in range(3):
        with pytest.raises(ConstraintError, match="limit is 100000"):
            huge.to_regex()
    after = spec_module._regex.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)
    assert json.loads(huge.source)["type"] == "object"
