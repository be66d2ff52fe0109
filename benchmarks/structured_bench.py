"""Structured outputs (docs/structured-outputs.md): what a constraint buys and costs.

- validity: the share of answers that validate (jsonschema / full regex match) without
  and with the constraint, on a random checkpoint that can spell JSON (the tests' tiny
  LLaDA with a JSON character tokenizer) and on the demo model's `add` task (regex
  [0-9]{1,4});
- speed: tokens/s constrained / unconstrained at batch 64 on the demo model, and on a
  random LLaDA checkpoint with LLaDA's vocabulary size (126,464 tokens, most of them
  multi-character: a synthetic BPE vocabulary; tiny layers), same prompts, same config,
  measured side by side in one run;
- compile time per schema over each vocabulary, `json_object` included: cold (the
  grammar built and validated, its first matcher made) and cached (the engine's digest
  cache); and the vocabulary's one-time preprocessing (llguidance's tokenizer).

    python benchmarks/structured_bench.py --batch 64 --rounds 2

With `--tree NAME=PATH` (repeatable, e.g. main=/tmp/main --tree branch=.) only the speed
figures are measured, for each source tree in its own process over the same
checkpoints, the trees taking turns round by round (the best round of each counts), so
a change's ratios come from one run on one machine's load.

Prints one JSON object. Random weights: validity without the constraint is noise."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if "--child" not in sys.argv:  # a --tree child imports its tree's (its PYTHONPATH)
    sys.path.insert(0, str(REPO))  # tests.* when run as a script

import jsonschema  # noqa: E402
import torch  # noqa: E402

from dinfer_batch.formats.parameters.structured import JSON_OBJECT  # noqa: E402
from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.constraints import spec as spec_module  # noqa: E402
from dinfer_engine.constraints.compiled import CompiledConstraints  # noqa: E402
from dinfer_engine.constraints.spec import ConstraintSpec  # noqa: E402
from dinfer_engine.request import GenerationRequest  # noqa: E402
from tests.json_models import (  # noqa: E402
    LLADA_VOCAB,
    NESTED_SCHEMA,
    big_vocab_checkpoint,
    write_json_model,
)

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                 "minItems": 1, "maxItems": 3}}, "required": ["name", "age", "tags"]},
    "enum": {"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
        "required": ["color", "ok"]},
    "nested": NESTED_SCHEMA,
}
BIG_CONFIG = GenerationConfig(gen_length=32, block_length=8, steps=16, decoder="threshold",
                              threshold=0.9)
ADD_REGEX = "[0-9]{1,4}"


def valid(spec: ConstraintSpec, text: str) -> bool:
    if spec.kind == "regex":
        return re.fullmatch(spec.source, text) is not None
    try:
        jsonschema.validate(json.loads(text), json.loads(spec.source))
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def validity(engine: Engine, prompts: list[str], spec: ConstraintSpec,
             config: GenerationConfig) -> dict[str, float]:
    share = {}
    for name, constraint in (("without", None), ("with", spec)):
        results = engine.generate([GenerationRequest(p, constraint=constraint)
                                   for p in prompts], config)
        share[name] = round(sum(r.finish_reason == "stop" and valid(spec, r.text)
                                for r in results) / len(results), 3)
    return share


def tokens_per_second(engine: Engine, prompts: list[str], spec: ConstraintSpec,
                      config: GenerationConfig, rounds: int) -> dict[str, float]:
    """Generated tokens (the whole canvas) per second, unconstrained and constrained,
    alternating rounds (the best of each: the machine is shared)."""
    engine.compile(spec)  # compile time is measured on its own
    best = {"unconstrained": 0.0, "constrained": 0.0}
    for _ in range(rounds):
        for name, constraint in (("unconstrained", None), ("constrained", spec)):
            start = time.perf_counter()
            results = engine.generate([GenerationRequest(p, constraint=constraint)
                                       for p in prompts], config)
            seconds = time.perf_counter() - start
            tokens = len(results) * engine.resolve_config(config).gen_length
            best[name] = max(best[name], tokens / seconds)
    return {name: round(value, 1) for name, value in best.items()} | {
        "ratio": round(best["constrained"] / best["unconstrained"], 3)}


def compile_seconds(engine: Engine, spec: ConstraintSpec) -> dict[str, Any]:
    engine.constraints = CompiledConstraints(engine.constraints.make_vocabulary,
                                             engine.constraints.limits)  # a cold compile
    engine.constraints.vocabulary.tokenizer()  # built once per model per process: apart
    spec_module._grammar.cache_clear()  # the grammar's validation, cold too
    start = time.perf_counter()
    grammar = engine.compile(spec)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    engine.compile(spec)
    cached = time.perf_counter() - start
    return {"cold_ms": round(cold * 1e3, 2), "cached_ms": round(cached * 1e3, 4),
            "grammar_chars": len(grammar.text)}


def vocabulary_seconds(engine: Engine) -> float:
    """The vocabulary's preprocessing for the grammar engine, once per model per process."""
    start = time.perf_counter()
    engine.constraints.make_vocabulary().tokenizer()
    return round(time.perf_counter() - start, 3)


def speed(args: argparse.Namespace, big: Path | None) -> dict[str, Any]:
    """One round of the speed figures on this process's source tree (a --tree child)."""
    demo = Engine.from_pretrained(args.demo)
    out: dict[str, Any] = {"demo_add_task": tokens_per_second(
        demo, [f"add {i * 7 % 1000} {i * 13 % 1000}=" for i in range(args.batch)],
        ConstraintSpec.regex(ADD_REGEX), GenerationConfig(), 1)}
    if big is not None:
        out["random_llada_126k"] = tokens_per_second(
            Engine.from_pretrained(big), [f"record {i}:" for i in range(args.batch)],
            ConstraintSpec.json_schema(SCHEMAS["person"]), BIG_CONFIG, 1)
    return {"source": str(Path(sys.modules[Engine.__module__].__file__ or "").parents[1]),
            "tokens_per_s": out}


def trees(args: argparse.Namespace) -> dict[str, Any]:
    """The speed figures of each --tree, rounds taking turns between trees."""
    named = [tree.split("=", 1) for tree in args.tree]
    best: dict[str, dict[str, dict[str, float]]] = {name: {} for name, _ in named}
    sources = {}
    with tempfile.TemporaryDirectory() as tmp:
        big = None if args.skip_big else big_vocab_checkpoint(Path(tmp) / "big")
        for _ in range(args.rounds):
            for name, path in named:
                command = [sys.executable, __file__, "--child", "--batch", str(args.batch),
                           "--demo", args.demo, "--big", str(big or "")]
                env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
                run = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE,
                                                text=True, env=env).stdout)
                print(json.dumps({name: run}), file=sys.stderr, flush=True)  # each round
                sources[name] = run["source"]  # where its engine came from
                for task, figures in run["tokens_per_s"].items():
                    kept = best[name].setdefault(task, figures)
                    for kind in ("unconstrained", "constrained"):
                        kept[kind] = max(kept[kind], figures[kind])
                    kept["ratio"] = round(kept["constrained"] / kept["unconstrained"], 3)
    return {"batch": args.batch, "rounds": args.rounds, "threads": torch.get_num_threads(),
            "trees": sources, "tokens_per_s": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--validity-prompts", type=int, default=16)
    parser.add_argument("--demo", default=str(REPO / "dinfer_models" / "demo"))
    parser.add_argument("--skip-big", action="store_true",
                        help="leave out the 126,464-token checkpoint")
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH of a source tree whose speed to measure (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--big", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.child:
        print(json.dumps(speed(args, Path(args.big) if args.big else None)))
        return
    if args.tree:
        print(json.dumps(trees(args), indent=2))
        return
    out: dict[str, Any] = {"batch": args.batch, "rounds": args.rounds,
                           "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Engine.from_pretrained(write_json_model(Path(tmp) / "json"))
        config = GenerationConfig(gen_length=64, block_length=16, steps=32,
                                  decoder="threshold", threshold=0.9)
        prompts = [f"record {i}:" for i in range(args.validity_prompts)]
        out["random_json_model"] = {
            "vocabulary": tiny.model.config.embedding_size,
            "config": "gen 64, block 16, threshold 0.9, greedy",
            "validity": {name: validity(tiny, prompts, ConstraintSpec.json_schema(s), config)
                         for name, s in SCHEMAS.items()},
            "compile": {name: compile_seconds(tiny, ConstraintSpec.json_schema(s))
                        for name, s in {**SCHEMAS, "json_object": JSON_OBJECT}.items()}}
        demo = Engine.from_pretrained(args.demo)
        add = ConstraintSpec.regex(ADD_REGEX)
        demo_prompts = [f"add {i * 7 % 1000} {i * 13 % 1000}=" for i in range(args.batch)]
        out["demo_add_task"] = {
            "constraint": ADD_REGEX, "config": "the model's defaults",
            "validity": validity(demo, demo_prompts[:args.validity_prompts], add,
                                 GenerationConfig()),
            "tokens_per_s": tokens_per_second(demo, demo_prompts, add, GenerationConfig(),
                                              args.rounds),
            "compile": compile_seconds(demo, add)}
        if not args.skip_big:
            big = Engine.from_pretrained(big_vocab_checkpoint(Path(tmp) / "big"))
            person = ConstraintSpec.json_schema(SCHEMAS["person"])
            out["random_llada_126k"] = {
                "vocabulary": LLADA_VOCAB, "config": "gen 32, block 8, threshold 0.9, greedy",
                "vocabulary_s": vocabulary_seconds(big),
                "compile": {name: compile_seconds(big, ConstraintSpec.json_schema(s))
                            for name, s in {**SCHEMAS, "json_object": JSON_OBJECT}.items()},
                "tokens_per_s": tokens_per_second(
                    big, [f"record {i}:" for i in range(args.batch)], person, BIG_CONFIG,
                    args.rounds)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
