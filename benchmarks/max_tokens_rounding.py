"""What a maximum that is not a multiple of the block costs, and what best_of costs
(docs/adr/059-any-maximum-and-the-jobs-endpoint.md), on the demo model.

Prints one JSON object:
- "maxima": per (max_tokens, block_length), the canvas decoded (whole blocks), the canvas
  over the tokens returned, and the engine's seconds per returned token at --batch rows,
  beside the multiples of the block just below and above (`vs_below`, `vs_above`: the
  ratios of seconds per returned token). With --early-stop off every row decodes its
  whole canvas, so "returned" is the maximum itself (the worst case); with it on (the
  service's default) rows end at their stop token.
- "best_of": per best_of k, the engine seconds per line (each line k rows with
  log-probabilities, the best one kept) and the ratio to k = 1, with the cost the
  service counts for the line (formats/lines/cost.py).

Each figure is the median of --rounds runs, taking turns.

    python benchmarks/max_tokens_rounding.py
    python benchmarks/max_tokens_rounding.py --batch 64 --rounds 5 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dinfer_batch.formats.lines.cost import request_cost  # noqa: E402
from dinfer_batch.formats.lines.requests import parse_line  # noqa: E402
from dinfer_batch.model_info import load_model_info  # noqa: E402
from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_models import MODELS_DIR  # noqa: E402

CASES = ((50, 8), (7, 32), (100, 32), (150, 32))


def prompts(count: int) -> list[str]:
    return [f"add {i % 50} {(7 * i) % 50}=" for i in range(count)]


def seconds(engine: Engine, rows: list[str], config: GenerationConfig) -> tuple[float, int]:
    """Wall seconds of one generate call, and the tokens it returned."""
    started = time.perf_counter()
    results = engine.generate(rows, config)
    return time.perf_counter() - started, sum(r.completion_tokens for r in results)


def per_token(engine: Engine, rows: list[str], configs: dict[int, GenerationConfig],
              rounds: int) -> dict[int, float]:
    """Median seconds per returned token of each config, the configs taking turns."""
    runs: dict[int, list[float]] = {length: [] for length in configs}
    for _ in range(rounds):
        for length, config in configs.items():
            took, returned = seconds(engine, rows, config)
            runs[length].append(took / max(returned, 1))
    return {length: statistics.median(values) for length, values in runs.items()}


def maxima(engine: Engine, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows, report = prompts(args.batch), []
    for maximum, block in CASES:
        below, above = max(block, maximum // block * block), -(-maximum // block) * block
        configs = {length: GenerationConfig(gen_length=length, block_length=block,
                                            early_stop=args.early_stop)
                   for length in sorted({maximum, below, above})}
        timed = per_token(engine, rows, configs, args.rounds)
        canvas = configs[maximum].resolve(engine.model_defaults).canvas_length
        report.append({"max_tokens": maximum, "block_length": block, "canvas": canvas,
                       "canvas_over_max_tokens": round(canvas / maximum, 3),
                       "seconds_per_returned_token": round(timed[maximum], 6),
                       "multiple_below": below, "multiple_above": above,
                       "vs_below": round(timed[maximum] / timed[below], 3),
                       "vs_above": round(timed[maximum] / timed[above], 3)})
    return report


def best_of(engine: Engine, args: argparse.Namespace) -> list[dict[str, Any]]:
    model = load_model_info(str(args.model), MODELS_DIR)
    lines = prompts(args.batch // 4 or 1)
    runs: dict[int, list[float]] = {k: [] for k in (1, 2, 4)}
    for _ in range(args.rounds):
        for k in runs:
            config = GenerationConfig(gen_length=args.best_of_tokens, logprobs=k > 1,
                                      temperature=1.0)
            rows = [line for line in lines for _ in range(k)]
            runs[k].append(seconds(engine, rows, config)[0] / len(lines))
    report = []
    for k, values in runs.items():
        body = {"prompt": "x", "best_of": k, "max_tokens": args.best_of_tokens}
        request = parse_line(json.dumps(body), 1).request or {}
        report.append({"best_of": k, "seconds_per_line": round(statistics.median(values), 5),
                       "vs_best_of_1": round(statistics.median(values)
                                             / statistics.median(runs[1]), 3),
                       "cost": request_cost(request, request["params"],
                                            model.config(request["params"]))})
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=MODELS_DIR / "demo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--best-of-tokens", type=int, default=24)
    parser.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args()
    engine = Engine.from_pretrained(args.model, device=args.device)
    engine.generate(prompts(2), GenerationConfig(gen_length=8, block_length=8))  # warm up
    report = {"model": str(args.model), "device": args.device, "batch": args.batch,
              "rounds": args.rounds, "early_stop": args.early_stop,
              "maxima": maxima(engine, args), "best_of": best_of(engine, args),
              # timings on a shared machine are only as good as its load
              "load_average_1_5_15_min": [round(x, 1) for x in os.getloadavg()]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
