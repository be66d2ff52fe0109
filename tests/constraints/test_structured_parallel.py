"""Structured outputs under tensor parallelism: a two-rank engine (gloo on the CPU), whose
ranks each hold half the vocabulary, gives the one-rank engine's tokens for a batch of
constrained and free rows, greedy and sampled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dinfer_engine import Engine, GenerationConfig
from tests.constraints.test_structured_outputs import PROMPTS, SPECS, check_all_valid
from tests.engine_requests import asked
from tests.json_models import write_json_model


@pytest.fixture(scope="module", params=["llada", "llada2"])
def pair(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    path: Path = write_json_model(tmp_path_factory.mktemp("tp_json") / request.param,
                                  request.param)
    with Engine.from_pretrained(path, tensor_parallel=2) as parallel:
        yield Engine.from_pretrained(path), parallel


@pytest.mark.parametrize(("decoder", "cache", "temperature"), [
    ("threshold", "dual", 0.0), ("credit", "none", 0.7)])
def test_two_ranks_give_one_ranks_tokens(pair, decoder, cache, temperature):
    one, two = pair
    config = GenerationConfig(gen_length=48, block_length=16, steps=24, decoder=decoder,
                              cache=cache, threshold=0.5, temperature=temperature)
    seeds = list(range(len(PROMPTS)))
    single = one.generate(asked(PROMPTS, seeds=seeds, constraints=SPECS), config)
    split = two.generate(asked(PROMPTS, seeds=seeds, constraints=SPECS), config)
    assert [r.token_ids for r in split] == [r.token_ids for r in single]
    check_all_valid(split, SPECS)
