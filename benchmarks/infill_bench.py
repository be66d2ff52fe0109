"""Filling in the middle (docs/infill.md): what infill rows cost next to ordinary rows,
what the length search costs, and, given examples, how often the middle is exact.

Prints one JSON object:
- "throughput": tokens/s of infill rows vs ordinary rows of the same canvas (an ordinary
  row's prompt is the infill row's text before and after the gap, so both rows are as
  wide and decode as many masks), at --batch rows, per decoder x cache, the median of
  --rounds runs alternating which goes first; "ratio" is infill / ordinary (goal >= 0.9).
- "search": seconds and forwards per line of --lines lines with one span of
  --max-tokens vs the length search over --lengths (the candidates as rows of one batch).
- "exact_match" (with --examples FILE or --tasks N): the share of examples whose middle
  comes back exactly, with the gap --max-tokens long ("fixed"), with the search
  ("search"), and with the example's own span when it gives one ("given_span").
  FILE is JSONL of {"before", "middle", "after"} (optional "span"); --tasks N takes N
  held-out infill examples from dinfer_training/tasks.py when that task exists.

    python benchmarks/infill_bench.py                      # dinfer_models/demo, batch 64
    python benchmarks/infill_bench.py --model DIR --device cuda --batch 64
    python benchmarks/infill_bench.py --model dinfer_models/demo --tasks 200 --lengths auto
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dinfer_engine import Engine, GenerationConfig, Infill  # noqa: E402

TEXT = ("def total(values):\n    acc = 0\n    for v in values:\n        acc += v\n"
        "    return acc\n\nprint(total([1, 2, 3]))\n")


def canvases(count: int, before: int, after: int) -> list[tuple[str, str]]:
    """`count` (before, after) pairs cut from rotations of TEXT."""
    text = TEXT * (1 + (before + after + count) // len(TEXT))
    return [(text[i:i + before], text[i + before:i + before + after]) for i in range(count)]


def timed(engine: Engine, prompts: list[Any], config: GenerationConfig) -> tuple[float, int]:
    started = time.perf_counter()
    results = engine.generate(prompts, config)
    return time.perf_counter() - started, sum(r.nfe for r in results)


def throughput(engine: Engine, args: argparse.Namespace) -> list[dict[str, Any]]:
    pairs = canvases(args.batch, args.before, args.after)
    infill = [Infill([b, a]) for b, a in pairs]
    ordinary = [b + a for b, a in pairs]
    runs = []
    for decoder in args.decoders.split(","):
        for cache in args.caches.split(","):
            config = GenerationConfig(gen_length=args.max_tokens, block_length=args.block,
                                      steps=args.max_tokens, decoder=decoder, cache=cache,
                                      early_stop=False, max_batch_size=args.batch)
            timed(engine, ordinary[:2], config)  # warm up
            seconds: dict[str, list[float]] = {"infill": [], "ordinary": []}
            forwards: dict[str, int] = {}
            for round_ in range(args.rounds):
                order = ("infill", "ordinary") if round_ % 2 == 0 else ("ordinary", "infill")
                for kind in order:
                    spent, forwards[kind] = timed(engine, infill if kind == "infill"
                                                  else ordinary, config)
                    seconds[kind].append(spent)
            tokens = args.batch * args.max_tokens
            speed = {kind: tokens / statistics.median(s) for kind, s in seconds.items()}
            runs.append({"decoder": decoder, "cache": cache,
                         "infill_tokens_per_s": round(speed["infill"], 1),
                         "ordinary_tokens_per_s": round(speed["ordinary"], 1),
                         "ratio": round(speed["infill"] / speed["ordinary"], 3),
                         # a decoder that stops early may need more forwards for one kind:
                         # the ratio is then the model's, not the engine's cost
                         "infill_forwards": forwards["infill"],
                         "ordinary_forwards": forwards["ordinary"]})
    return runs


def search_cost(engine: Engine, args: argparse.Namespace) -> dict[str, Any]:
    pairs = canvases(args.lines, args.before, args.after)
    lengths = lengths_arg(args.lengths)
    config = GenerationConfig(gen_length=args.max_tokens, block_length=args.block,
                              steps=args.max_tokens, early_stop=False)
    fixed = timed(engine, [Infill([b, a]) for b, a in pairs], config)
    search = timed(engine, [Infill([b, a], lengths=lengths) for b, a in pairs], config)
    return {"lines": args.lines, "lengths": lengths, "max_tokens": args.max_tokens,
            "fixed_s_per_line": round(fixed[0] / args.lines, 4),
            "search_s_per_line": round(search[0] / args.lines, 4),
            "fixed_nfe_per_line": fixed[1] / args.lines,
            "search_nfe_per_line": search[1] / args.lines,
            "cost_ratio": round(search[0] / fixed[0], 3)}


def load_examples(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.examples:
        return [json.loads(line) for line in Path(args.examples).read_text().splitlines()
                if line.strip()]
    from dinfer_training import tasks  # the demo's tasks, when they include infill

    if "infill" not in tasks.TASKS:
        raise SystemExit("dinfer_training/tasks.py has no infill task here; give --examples FILE")
    return [{"before": e.prompt, "middle": e.answer, "after": e.suffix, "span": e.span}
            for e in tasks.eval_set(args.tasks, ("infill",))]


def exact_match(engine: Engine, args: argparse.Namespace) -> dict[str, Any]:
    examples = load_examples(args)
    config = GenerationConfig(gen_length=args.max_tokens, block_length=args.block,
                              steps=args.max_tokens)
    modes: dict[str, list[Infill]] = {
        "fixed": [Infill([e["before"], e["after"]]) for e in examples],
        "search": [Infill([e["before"], e["after"]], lengths=lengths_arg(args.lengths))
                   for e in examples]}
    if all(e.get("span") for e in examples):
        modes["given_span"] = [Infill([e["before"], e["after"]], spans=[e["span"]])
                               for e in examples]
    out: dict[str, Any] = {"examples": len(examples)}
    for mode, prompts in modes.items():
        results = engine.generate(prompts, config)
        hits = sum(r.text == e["middle"] for r, e in zip(results, examples, strict=True))
        out[mode] = round(hits / len(examples), 4)
    return out


def lengths_arg(value: str) -> list[int] | str:
    return value if value == "auto" else [int(v) for v in value.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO / "dinfer_models" / "demo"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=64, help="rows of the throughput runs")
    parser.add_argument("--before", type=int, default=48, help="characters before the gap")
    parser.add_argument("--after", type=int, default=32, help="characters after the gap")
    parser.add_argument("--max-tokens", type=int, default=32, help="the gap's length")
    parser.add_argument("--block", type=int, default=8, help="block_length")
    parser.add_argument("--decoders", default="fixed,threshold")
    parser.add_argument("--caches", default="none,dual")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=16, help="lines of the search run")
    parser.add_argument("--lengths", default="auto",
                        help="candidates of the search: auto, or e.g. 8,16,32")
    parser.add_argument("--examples", help="JSONL of {before, middle, after[, span]}")
    parser.add_argument("--tasks", type=int, help="held-out infill examples from dinfer_training/")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    engine = Engine.from_pretrained(args.model, device=args.device)
    report: dict[str, Any] = {"model": args.model, "device": args.device,
                              "batch": args.batch, "max_tokens": args.max_tokens,
                              "block_length": args.block,
                              "canvas_chars": [args.before, args.after]}
    if not args.skip_throughput:
        report["throughput"] = throughput(engine, args)
        report["search"] = search_cost(engine, args)
    if args.examples or args.tasks:
        report["exact_match"] = exact_match(engine, args)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
