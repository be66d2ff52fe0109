"""Accuracy and parallelism of the demo model on held-out prompts, for every decoder x
cache x smoothing setting.

Prints one JSON object. Per setting: per-task exact-match accuracy, per-task content TPF
(answer tokens up to and including the first EOS, per forward), forwards per sample and
content tokens per second (all prompts through one engine, at most --batch-size rows at a
time), all greedy. Short tasks run with answer length 24, `count` with 64 (ANSWER_REGION),
blocks of 8. `goal` compares every setting with the baseline (threshold 0.9, no cache, no
smoothing) on `count`: content TPF ratio and accuracy change in points.

    python benchmarks/demo_eval.py --per-task 100
    python benchmarks/demo_eval.py --per-task 20 --decoders threshold credit --caches dual
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from engine import Engine, GenerationConfig, GenerationResult
from training.tasks import (
    ANSWER_REGION,
    EVAL_SEED,
    HELD_OUT_PER_TASK,
    TASKS,
    Example,
    check,
    eval_set,
)

BLOCK_LENGTH = 8
DECODERS = {
    "fixed": dict(decoder="fixed"),  # one token per step
    "threshold": dict(decoder="threshold", threshold=0.9),
    "hierarchical": dict(decoder="hierarchical", threshold=0.9, low_threshold=0.4),
    "credit": dict(decoder="credit", threshold=0.9),
}
CACHES = {
    "none": dict(cache="none"),
    "prefix": dict(cache="prefix"),
    "dual": dict(cache="dual"),
    "vicinity": dict(cache="vicinity", prefix_look=16, after_look=16, warmup_steps=4),
}
BASELINE = "threshold/none/plain"
GOAL_TASK = "count"


def content_tokens(result: GenerationResult) -> int:
    return result.completion_tokens + (result.finish_reason == "stop")


def evaluate(engine: Engine, examples: list[Example], fields: dict,
             batch_size: int) -> dict[str, object]:
    by_length: dict[int, list[Example]] = {}
    for ex in examples:
        by_length.setdefault(ANSWER_REGION[ex.task], []).append(ex)
    per_task = {task: {"correct": 0, "n": 0, "content": 0, "forwards": 0} for task in TASKS}
    started = time.perf_counter()
    for gen_length, group in by_length.items():
        config = GenerationConfig(gen_length=gen_length, block_length=BLOCK_LENGTH,
                                  steps=gen_length, max_batch_size=batch_size, **fields)
        results = engine.generate([ex.prompt for ex in group], config)
        for ex, res in zip(group, results, strict=True):
            counts = per_task[ex.task]
            counts["correct"] += check(ex, res.text)
            counts["n"] += 1
            counts["content"] += content_tokens(res)
            counts["forwards"] += res.nfe
    seconds = time.perf_counter() - started
    tasks = {task: c for task, c in per_task.items() if c["n"]}
    total = {key: sum(c[key] for c in tasks.values()) for key in ("correct", "n", "content",
                                                                   "forwards")}
    return {
        "accuracy": round(total["correct"] / total["n"], 4),
        "per_task_accuracy": {t: round(c["correct"] / c["n"], 4) for t, c in tasks.items()},
        "per_task_content_tpf": {t: round(c["content"] / c["forwards"], 3)
                                 for t, c in tasks.items()},
        "forwards_per_sample": round(total["forwards"] / total["n"], 3),
        "content_tokens_per_s": round(total["content"] / seconds, 1),
        "seconds": round(seconds, 2),
    }


def goal(settings: dict[str, dict]) -> dict[str, object]:
    """Every setting against the baseline on GOAL_TASK, best content TPF first."""
    if BASELINE not in settings:
        return {}
    base = settings[BASELINE]
    rows = []
    for name, row in settings.items():
        if GOAL_TASK not in row["per_task_content_tpf"]:
            continue
        rows.append({
            "setting": name,
            "tpf_ratio": round(row["per_task_content_tpf"][GOAL_TASK]
                               / base["per_task_content_tpf"][GOAL_TASK], 3),
            "accuracy_change_points": round(100 * (row["per_task_accuracy"][GOAL_TASK]
                                                   - base["per_task_accuracy"][GOAL_TASK]), 1),
        })
    rows.sort(key=lambda r: -r["tpf_ratio"])
    met = [r for r in rows if r["tpf_ratio"] >= 1.2 and r["accuracy_change_points"] >= -1]
    return {"task": GOAL_TASK, "baseline": BASELINE, "met_by": [r["setting"] for r in met],
            "ranking": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("models/demo"))
    ap.add_argument("--per-task", type=int, default=100,
                    help=f"held-out prompts per task (at most {HELD_OUT_PER_TASK})")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--decoders", nargs="*", default=list(DECODERS), choices=DECODERS)
    ap.add_argument("--caches", nargs="*", default=list(CACHES), choices=CACHES)
    ap.add_argument("--smoothing", nargs="*", default=["plain", "smooth"],
                    choices=["plain", "smooth"])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, help="torch intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    engine = Engine.from_pretrained(args.model)
    examples = eval_set(args.per_task, tuple(args.tasks))
    settings: dict[str, dict] = {}
    for decoder, cache, smoothing in itertools.product(args.decoders, args.caches,
                                                        args.smoothing):
        fields = {**DECODERS[decoder], **CACHES[cache], "smoothing": smoothing == "smooth"}
        settings[f"{decoder}/{cache}/{smoothing}"] = evaluate(engine, examples, fields,
                                                              args.batch_size)
    print(json.dumps({
        "model": str(args.model), "samples": len(examples), "held_out_seed": EVAL_SEED,
        "block_length": BLOCK_LENGTH, "answer_length": {t: ANSWER_REGION[t] for t in args.tasks},
        "batch_size": args.batch_size, "settings": settings, "goal": goal(settings),
    }, indent=2))


if __name__ == "__main__":
    main()
