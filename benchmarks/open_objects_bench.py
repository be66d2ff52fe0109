"""Open objects on a model that writes JSON (ADR 049): the demo model's JSON tasks
(dinfer_models/demo, `json add`, `json rev`, `json sort`) with each task's schema opened
(no `additionalProperties: false`) and an optional `note` property declared first, so
that llguidance offers a key the answer does not need before the required ones. Per task
and canvas (--gen-lengths), the share of answers that end "stop" and the share of those
that jsonschema validates; a canvas of 32 holds the task's answer only if the closing
plan leaves the optional key out (the greedy path writes `"note":""` first).

    python benchmarks/open_objects_bench.py --tree main=/work/main --tree branch=.

--tree NAME=PATH (repeatable) runs each source tree in its own process, one after the
other; without it, this tree alone. Prints one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROMPTS = 16


def prompts(task: str, rng: random.Random) -> list[str]:
    if task == "json_add":
        return [f"json add {rng.randint(0, 999)} {rng.randint(0, 999)}=" for _ in range(PROMPTS)]
    letters, digits = "abcdefghijklmnop", "0123456789"
    if task == "json_rev":
        return ["json rev " + "".join(rng.choices(letters, k=5)) + "=" for _ in range(PROMPTS)]
    return ["json sort " + "".join(rng.choices(digits, k=5)) + "=" for _ in range(PROMPTS)]


def opened(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema left open, with an optional property declared before the others."""
    out = {k: v for k, v in schema.items() if k != "additionalProperties"}
    return out | {"properties": {"note": {"type": "string"}, **schema["properties"]}}


def measure(gen_lengths: list[int]) -> dict[str, Any]:
    """This process's tree: stop and valid shares per task and canvas."""
    import jsonschema

    from dinfer_engine import Engine, GenerationConfig
    from dinfer_engine.constraints.spec import ConstraintSpec
    from dinfer_engine.request import GenerationRequest
    from dinfer_training.json_tasks import JSON_SCHEMAS

    engine = Engine.from_pretrained(REPO / "dinfer_models" / "demo")
    out: dict[str, Any] = {"source": str(Path(sys.modules[Engine.__module__].__file__ or "")
                                         .parents[1])}
    for gen_length in gen_lengths:
        for task, schema in JSON_SCHEMAS.items():
            spec, schema = ConstraintSpec.json_schema(opened(schema)), opened(schema)
            config = GenerationConfig(gen_length=gen_length, block_length=16, steps=gen_length)
            results = engine.generate([GenerationRequest(p, constraint=spec)
                                       for p in prompts(task, random.Random(0))], config)
            stops = [r.text for r in results if r.finish_reason == "stop"]
            valid = sum(jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
                        for text in stops)
            out[f"{task}@{gen_length}"] = {
                "stop_pct": round(100 * len(stops) / PROMPTS, 1),
                "valid_pct_of_stop": round(100 * valid / len(stops), 1) if stops else None,
                "first": results[0].text[:80]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gen-lengths", type=int, nargs="+", default=[48, 32])
    parser.add_argument("--tree", action="append", default=[])
    args = parser.parse_args()
    if not args.tree:
        print(json.dumps(measure(args.gen_lengths)))
        return
    out: dict[str, Any] = {"prompts_per_task": PROMPTS, "trees": {}}
    for name, path in (tree.split("=", 1) for tree in args.tree):
        command = [sys.executable, __file__, "--gen-lengths", *map(str, args.gen_lengths)]
        env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
        done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, env=env)
        out["trees"][name] = json.loads(done.stdout)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
