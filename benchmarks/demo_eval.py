"""Accuracy and parallelism of the demo model on held-out prompts, per decoder.

Prints one JSON object: for each decoder setting, per-task and overall exact-match
accuracy, forwards per sample, TPF (answer-region tokens per forward) and content TPF
(answer tokens up to and including the first EOS, per forward), all greedy.

    python benchmarks/demo_eval.py --model models/demo --per-task 100
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from engine import Engine, GenerationConfig, GenerationResult
from training.tasks import EVAL_SEED, HELD_OUT_PER_TASK, TASKS, Example, check, eval_set


def decoder_settings(gen_length: int) -> dict[str, GenerationConfig]:
    return {
        "fixed_1_per_step": GenerationConfig(decoder="fixed", steps=gen_length),
        "fixed_2_per_step": GenerationConfig(decoder="fixed", steps=gen_length // 2),
        "threshold_0.9": GenerationConfig(decoder="threshold", threshold=0.9),
        "threshold_0.7": GenerationConfig(decoder="threshold", threshold=0.7),
        "threshold_0.5": GenerationConfig(decoder="threshold", threshold=0.5),
    }


def score(examples: list[Example], results: list[GenerationResult],
          gen_length: int) -> dict[str, object]:
    per_task = {task: [0, 0] for task in TASKS}
    for ex, res in zip(examples, results, strict=True):
        per_task[ex.task][0] += check(ex, res.text)
        per_task[ex.task][1] += 1
    forwards = sum(r.nfe for r in results)
    content = sum(r.completion_tokens + (r.finish_reason == "stop") for r in results)
    return {
        "accuracy": sum(c for c, _ in per_task.values()) / len(examples),
        "per_task": {task: c / n for task, (c, n) in per_task.items() if n},
        "forwards_per_sample": forwards / len(examples),
        "tpf": gen_length * len(examples) / forwards,
        "content_tpf": content / forwards,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("models/demo"))
    ap.add_argument("--per-task", type=int, default=100,
                    help=f"held-out prompts per task (at most {HELD_OUT_PER_TASK})")
    ap.add_argument("--decoders", nargs="*", help="subset of the settings to run")
    args = ap.parse_args()
    engine = Engine.from_pretrained(args.model)
    examples = eval_set(args.per_task)
    prompts = [ex.prompt for ex in examples]
    gen_length = engine.resolve_config().gen_length
    report: dict[str, object] = {"model": str(args.model), "samples": len(examples),
                                 "held_out_seed": EVAL_SEED, "gen_length": gen_length}
    for name, config in decoder_settings(gen_length).items():
        if args.decoders and name not in args.decoders:
            continue
        started = time.perf_counter()
        results = engine.generate(prompts, config)
        report[name] = {**score(examples, results, gen_length),
                        "seconds": round(time.perf_counter() - started, 2)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
