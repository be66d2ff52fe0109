"""Structured outputs on DiffusionGemma (docs/adr/043-structured-outputs-on-uniform-noise.md):
what a constraint costs and buys on a random checkpoint made with transformers' classes.

For each constraint (a JSON schema, json_object, a regex, a choice), one batch of
--batch-size rows constrained by it and the same rows free, alternating --rounds times
(the best round of each counts: the machine is shared), in one run. Prints one JSON
object with, per constraint:
- tokens_per_s: answer tokens (up to and including the stop token) over wall seconds,
  constrained and free, and their ratio; the rows' lengths differ (a constrained
  answer ends where its grammar does, a free one where the random model writes a stop
  token), so also
- row_forwards_per_s: decoder forwards of a row (one row's canvas, one step) per
  second, and their ratio: what a step costs with the constraint;
- stop_share and valid_share of the constrained answers (jsonschema / full match),
  and valid_share of the free ones (noise, on random weights);
- constraint_share: the share of the constrained run's seconds spent keeping each
  row's best tokens per step (observe) and building the committed witnesses (commit).

    python benchmarks/diffusion_gemma_structured_bench.py          # vocabulary 64
    python benchmarks/diffusion_gemma_structured_bench.py --vocab 262144 --batch-size 4
    python benchmarks/diffusion_gemma_structured_bench.py --vocab 262144 --device cuda \
        --dtype bfloat16 --batch-size 64 --canvas-length 256 --gen-length 256   # a GPU

--vocab 64: the tests' JSON character tokenizer; larger: a synthetic BPE tokenizer of
that many tokens (tests/json_models.py's), whose random logits rarely put an
allowed token among a position's best, the witness's hardest case.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.* when run as a script

from dinfer_batch.formats.parameters.structured import JSON_OBJECT  # noqa: E402
from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.canvas.uniform_constraints import CommittedCanvases  # noqa: E402
from dinfer_engine.constraints.spec import ConstraintSpec  # noqa: E402
from dinfer_engine.request import GenerationRequest  # noqa: E402
from dinfer_training.char_tokenizer import save_char_tokenizer  # noqa: E402
from tests.constraints.test_structured_outputs import valid  # noqa: E402
from tests.json_models import JSON_CHARS, VOCAB, big_vocab_tokenizer  # noqa: E402
from tests.tiny_diffusion_gemma import GENERATION_CONFIG, write_tiny_diffusion_gemma  # noqa: E402
from tests.tiny_model import PAD_ID  # noqa: E402

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
             "minItems": 1, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
SPECS = {"person_schema": ConstraintSpec.json_schema(PERSON),
         "json_object": ConstraintSpec.json_schema(JSON_OBJECT),
         "regex": ConstraintSpec.regex("[a-f]{3}-[0-9]{2}"),
         "choice": ConstraintSpec.choice(["yes", "no", "maybe so"])}


class Timed:
    """Seconds spent in CommittedCanvases' observe and commit while installed."""

    def __init__(self) -> None:
        self.seconds = {"observe": 0.0, "commit": 0.0}
        self._kept = {name: getattr(CommittedCanvases, name) for name in self.seconds}

    def __enter__(self) -> Timed:
        for name, method in self._kept.items():
            setattr(CommittedCanvases, name, self._timed(name, method))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, method in self._kept.items():
            setattr(CommittedCanvases, name, method)

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return timed


def one_run(engine: Engine, prompts: list[str], spec: ConstraintSpec | None,
            config: GenerationConfig) -> dict[str, Any]:
    with Timed() as timed:
        start = time.perf_counter()
        results = engine.generate([GenerationRequest(p, seed=s, constraint=spec)
                                   for s, p in enumerate(prompts)], config)
        seconds = time.perf_counter() - start
    stops = [r.finish_reason == "stop" for r in results]
    checked = SPECS["person_schema"] if spec is None else spec
    return {"seconds": seconds,
            "tokens": sum(sum(t != PAD_ID for t in r.token_ids) + s
                          for r, s in zip(results, stops, strict=True)),
            "forwards": sum(r.nfe for r in results),
            "stop_share": sum(stops) / len(results),
            "valid_share": sum(s and valid(checked, r.text)
                               for r, s in zip(results, stops, strict=True)) / len(results),
            "constraint_seconds": dict(timed.seconds)}


def compare(engine: Engine, prompts: list[str], spec: ConstraintSpec,
            config: GenerationConfig, rounds: int) -> dict[str, Any]:
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, constraint in (("free", None), ("constrained", spec)):
            run = one_run(engine, prompts, constraint, config)
            if name not in best or run["seconds"] < best[name]["seconds"]:
                best[name] = run
    free, constrained = best["free"], best["constrained"]
    rates = {name: {"tokens_per_s": run["tokens"] / run["seconds"],
                    "row_forwards_per_s": run["forwards"] / run["seconds"]}
             for name, run in best.items()}
    return {
        "tokens_per_s": {name: round(r["tokens_per_s"], 1) for name, r in rates.items()}
        | {"ratio": round(rates["constrained"]["tokens_per_s"]
                          / rates["free"]["tokens_per_s"], 3)},
        "row_forwards_per_s": {name: round(r["row_forwards_per_s"], 1)
                               for name, r in rates.items()}
        | {"ratio": round(rates["constrained"]["row_forwards_per_s"]
                          / rates["free"]["row_forwards_per_s"], 3)},
        "stop_share": round(constrained["stop_share"], 3),
        "valid_share": {"constrained": round(constrained["valid_share"], 3),
                        "free": round(free["valid_share"], 3)},
        "constraint_share": {name: round(seconds / constrained["seconds"], 3)
                             for name, seconds in constrained["constraint_seconds"].items()},
        "seconds": {name: round(run["seconds"], 2) for name, run in best.items()}}


def checkpoint(directory: Path, args: argparse.Namespace) -> Path:
    generation = {**GENERATION_CONFIG, "max_denoising_steps": args.steps}
    shape = dict(generation=generation, hidden=args.hidden, canvas_length=args.canvas_length,
                 num_hidden_layers=args.layers,
                 layer_types=["sliding_attention"] * (args.layers - 1) + ["full_attention"])
    write_tiny_diffusion_gemma(directory, vocab_size=args.vocab, **shape)
    if args.vocab == VOCAB:
        save_char_tokenizer(JSON_CHARS, directory)
    else:
        big_vocab_tokenizer(directory, args.vocab)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--canvas-length", type=int, default=16)
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8, help="max_denoising_steps")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--only", choices=list(SPECS), action="append",
                        help="these constraints only (repeatable)")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine.from_pretrained(checkpoint(Path(tmp) / "dg", args),
                                        device=args.device, dtype=args.dtype)
        prompts = [f"record {i}:" for i in range(args.batch_size)]
        config = GenerationConfig(gen_length=args.gen_length, early_stop=False,
                                  max_batch_size=args.batch_size)
        start = time.perf_counter()
        for spec in SPECS.values():
            engine.compile(spec)  # compiles and the vocabulary's preprocessing: apart
        report: dict[str, Any] = {
            "threads": torch.get_num_threads(), "settings": vars(args),
            "vocabulary_and_compile_s": round(time.perf_counter() - start, 2),
            "constraints": {name: compare(engine, prompts, spec, config, args.rounds)
                            for name, spec in SPECS.items()
                            if not args.only or name in args.only}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
