"""Constrained answers pinned by digest: the witness's speed-ups (ADR 048) change no
choice, so the same seeds give the same tokens as before them, greedy and sampled, with
the decoders whose confidences come from the wrapped decoder's log-sum-exp (fixed,
threshold) and from the logits again (credit), on the JSON test model and on a random
checkpoint over real-world JSONSchemaBench schemas. The digests were recorded on the
code before ADR 048; a change of choices shows here as a changed digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.constraints.test_structured_outputs import PROMPTS, SPECS
from tests.engine_requests import asked
from tests.json_models import big_vocab_checkpoint, write_json_model

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "jsonschemabench"
# the first schemas of a few datasets, every one accepted by the engine
BENCH_SCHEMAS = [(name, index) for name in ("Github_easy", "Glaiveai2K", "Kubernetes")
                 for index in range(2)]
PINNED = {
    ("threshold", 0.0): "2258e55fc72a306a",
    ("fixed", 0.8): "cdc6ba8df0fe2abf",
    ("credit", 0.0): "2258e55fc72a306a",
    ("bench", 0.0): "5b12fa8f0aee3149",
}


def digest(results: list[Any]) -> str:
    answers = [[r.token_ids, r.finish_reason] for r in results]
    return hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def json_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("json"), "llada"))


@pytest.mark.parametrize(("decoder", "temperature"),
                         [("threshold", 0.0), ("fixed", 0.8), ("credit", 0.0)])
def test_the_json_models_constrained_answers_are_pinned(json_engine, decoder, temperature):
    config = GenerationConfig(gen_length=64, block_length=16, steps=32, decoder=decoder,
                              threshold=0.5, temperature=temperature)
    results = json_engine.generate(asked(PROMPTS, seeds=list(range(len(PROMPTS))),
                                         constraints=SPECS), config)
    assert digest(results) == PINNED[(decoder, temperature)]


def test_real_world_schemas_answers_are_pinned(tmp_path):
    engine = Engine.from_pretrained(big_vocab_checkpoint(tmp_path / "big", size=8192))
    lines = {name: (BENCH / f"{name}.jsonl").read_text().splitlines()
             for name, _ in BENCH_SCHEMAS}
    specs = [ConstraintSpec.json_schema(json.loads(lines[name][index])["schema"])
             for name, index in BENCH_SCHEMAS]
    config = GenerationConfig(gen_length=64, block_length=32, steps=32, decoder="threshold",
                              threshold=0.9)
    results = engine.generate(asked(["answer:"] * len(specs), constraints=specs), config)
    assert digest(results) == PINNED[("bench", 0.0)]
