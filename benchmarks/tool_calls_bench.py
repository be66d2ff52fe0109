"""Function calling (docs/tools.md, ADR 061): what tools cost at intake and what the
answers are. Prints JSON:

- `intake_ms_per_line`: parsing a chat line with OpenAI's weather tool, by `tool_choice`
  (and without tools), over `--lines` lines (the tools' constraint is prepared once per
  distinct set of tools);
- `answers`: on a random LLaDA checkpoint with a `--vocab`-token BPE vocabulary
  (tests/json_models.py), the first `--schemas` JSONSchemaBench Glaive schemas as one
  tool each, `--rows` rows per `tool_choice`: the share ending `"stop"`, the share that
  are calls, the share of calls whose arguments validate (jsonschema: 1.0 by
  construction), and tokens/s beside the same rows unconstrained.

    python benchmarks/tool_calls_bench.py [--lines 2000] [--vocab 4096] [--rows 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.json_models when run as a script

import jsonschema  # noqa: E402

from dinfer_batch.formats.function_calling.tool_calls import answer_calls  # noqa: E402
from dinfer_batch.formats.function_calling.tool_grammar import tool_spec  # noqa: E402
from dinfer_batch.formats.lines.requests import parse_line  # noqa: E402
from dinfer_engine import Engine, GenerationConfig, GenerationRequest  # noqa: E402
from tests.json_models import big_vocab_checkpoint  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get current temperature for a given location.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location", "unit"], "additionalProperties": False}}}
CHOICES: list[Any] = ["none", "auto", "required"]


def intake(lines: int) -> dict[str, float]:
    """ms per line to parse, by tool_choice ("no tools": the same line without them)."""
    out = {}
    for choice in [None, *CHOICES]:
        body = {"model": "m", "messages": [{"role": "user", "content": "Paris?"}]}
        if choice is not None:
            body |= {"tools": [WEATHER], "tool_choice": choice}
        line = json.dumps({"custom_id": "x", "method": "POST",
                           "url": "/v1/chat/completions", "body": body})
        started = time.perf_counter()
        for index in range(lines):
            assert parse_line(line, index + 1).error is None
        out[choice or "no tools"] = round((time.perf_counter() - started) / lines * 1e3, 4)
    return out


def answers(vocab: int, schemas: int, rows: int) -> dict[str, Any]:
    bench = REPO / "benchmarks" / "data" / "jsonschemabench" / "Glaiveai2K.jsonl"
    functions = [{"name": f"f{index}", "parameters": json.loads(line)["schema"]}
                 for index, line in enumerate(bench.read_text().splitlines()[:schemas])]
    with tempfile.TemporaryDirectory() as directory:
        engine = Engine.from_pretrained(big_vocab_checkpoint(Path(directory), vocab))
        config = GenerationConfig(gen_length=128, block_length=32, steps=64,
                                  decoder="threshold", threshold=0.9)
        prompts = [f"call {index}" for index in range(rows)]
        free = _timed(engine, prompts, config, None)
        out: dict[str, Any] = {"free_tokens_per_s": free[1]}
        for choice in ("required", "auto"):
            tools = {"functions": functions, "choice": choice, "parallel": True}
            results, speed = _timed(engine, prompts, config,
                                    tool_spec(functions, choice, True))
            out[choice] = _shares(results, tools) | {"tokens_per_s": speed}
    return out


def _timed(engine: Engine, prompts: list[str], config: GenerationConfig,
           spec: Any) -> tuple[list[Any], float]:
    engine.generate([GenerationRequest(prompts[0], constraint=spec)], config)  # compile, warm up
    started = time.perf_counter()
    results = engine.generate([GenerationRequest(p, constraint=spec) for p in prompts], config)
    tokens = sum(r.completion_tokens for r in results)
    return results, round(tokens / (time.perf_counter() - started), 1)


def _shares(results: list[Any], tools: dict[str, Any]) -> dict[str, float]:
    by_name = {f["name"]: f["parameters"] for f in tools["functions"]}
    calls = [answer_calls(r.text, tools) for r in results]
    made = [call for answer in calls for call in answer or []]
    valid = 0
    for call in made:
        try:
            jsonschema.validate(json.loads(call["arguments"]), by_name[call["name"]])
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return {"stop_share": round(sum(r.finish_reason == "stop" for r in results)
                                / len(results), 3),
            "calls_share": round(sum(bool(c) for c in calls) / len(results), 3),
            "calls": len(made), "valid_share": round(valid / len(made), 3) if made else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--schemas", type=int, default=5)
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    print(json.dumps({"intake_ms_per_line": intake(args.lines),
                      "answers": answers(args.vocab, args.schemas, args.rows)}, indent=2))


if __name__ == "__main__":
    main()
