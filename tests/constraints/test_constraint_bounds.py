"""Constraint compiles are bounded (dinfer_engine/constraints/compiled.py): a constraint that
cannot compile is compiled once and its reason remembered; the compiled grammars kept
are bounded by bytes; a spec's grammar is validated at submit in milliseconds, and its
failure remembered. Real compiles over a real tokenizer."""

from __future__ import annotations

import time

import pytest

from dinfer_batch.formats.limits import InvalidParam
from dinfer_batch.formats.parameters.structured import checked
from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints import spec as spec_module
from dinfer_engine.constraints.compiled import CompiledConstraints, CompileLimits
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintError, ConstraintFailures
from tests.engine_requests import asked
from tests.json_models import write_json_model

# patterns whose first character ('Q', '~') the JSON models' vocabulary cannot spell
UNSPELLABLE = ["[QR][ab]*a[ab]{7}", "[~^][xy]*y[xy]{5}"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("m") / "llada"))


def config() -> GenerationConfig:
    return GenerationConfig(gen_length=16, block_length=8, steps=8, decoder="threshold",
                            threshold=0.5)


@pytest.mark.parametrize("pattern", UNSPELLABLE)
def test_a_constraint_that_cannot_compile_is_compiled_once_and_its_reason_remembered(
        engine, pattern):
    bad, good = ConstraintSpec.regex(pattern), ConstraintSpec.regex(f"[a-c]{{2}}{pattern[5]}")
    before = engine.constraints.compiles
    for prompts in (["a", "b", "c"], ["d", "e"], ["f", "g", "h"]):
        specs = [bad, good, bad][:len(prompts)]
        with pytest.raises(ConstraintFailures) as failed:
            engine.generate(asked(prompts, constraints=specs), config())
        assert set(failed.value.errors) == {i for i, s in enumerate(specs) if s is bad}
        assert all("cannot spell" in reason for reason in failed.value.errors.values())
    assert engine.constraints.compiles == before + 2  # the bad one once, the good one once
    assert engine.constraint_error(bad) == failed.value.errors[0]
    assert engine.constraint_error(good) is None
    # the good constraint still runs; nothing more compiles
    [result] = engine.generate(asked(["x"], constraints=[good]), config())
    assert engine.constraints.compiles == before + 2 and len(result.text) <= 3


def test_the_cache_is_bounded_by_bytes_and_evicts_the_least_recently_used(engine):
    specs = [ConstraintSpec.regex(f"[ab]*a[ab]{{{k}}}" + "x" * 400 * k) for k in (1, 2, 3)]
    sizes = [engine.compile(s).bytes for s in specs]
    assert sizes[0] < sizes[1] < sizes[2]
    kept = CompiledConstraints(engine.constraints.make_vocabulary,
                               CompileLimits(cache_bytes=sizes[1] + sizes[2]))
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
        large = ConstraintSpec.regex("[ab]*" + "x" * 30_000)
        kept.limits = CompileLimits(cache_bytes=sizes[2])
        for _ in range(2):
            with pytest.raises(ConstraintError, match=r"more than the constraint cache's "
                                                      r"budget of [\d.]+ MB"):
                engine.compile(large)
        assert kept.compiles == 5 and kept.error(large) is not None
    finally:
        engine.constraints = original


def optional_properties(count: int, title: str = "") -> dict:
    """A small schema whose regular expression (wave 4's automaton) grew with the square
    of `count`; its grammar does not."""
    return {"title": title, "type": "object", "properties": {
        f"p{i}": {"type": "string"} for i in range(count)}}


def test_submit_checks_take_milliseconds_and_name_what_is_refused():
    started = time.perf_counter()
    for index in range(100):
        assert checked(ConstraintSpec.json_schema(optional_properties(64, f"s{index}")),
                       "f")["kind"] == "json_schema"
    assert time.perf_counter() - started < 10  # ~1 ms each on an idle machine
    with pytest.raises(InvalidParam, match="f: schema: keyword 'uniqueItems' is not supported"):
        checked(ConstraintSpec.json_schema({"type": "array", "uniqueItems": True}), "f")
    with pytest.raises(InvalidParam, match="f: the regex is not supported: .*look-around"):
        checked(ConstraintSpec.regex("a(?=b)"), "f")


def test_a_validation_failure_is_remembered():
    bad = ConstraintSpec.regex("a(?=c)")
    before = spec_module._grammar.cache_info()
    for _ in range(3):
        with pytest.raises(ConstraintError, match="look-around"):
            bad.grammar()
    after = spec_module._grammar.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)
