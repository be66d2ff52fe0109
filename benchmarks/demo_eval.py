"""Accuracy and parallelism of demo models on held-out prompts, model by model (--models,
several side by side in one run), section by section (SECTIONS: one function each,
taking the engine and the arguments and returning a JSON-able dict).

Sections:
- `tasks`: every completion task the model's vocabulary can write, for every decoder x
  cache x smoothing setting: per-task exact-match accuracy, content TPF (answer tokens up
  to and including the first EOS, per forward), forwards per sample and content tokens
  per second (all prompts through one engine, at most --batch-size rows at a time), all
  greedy; for the JSON tasks also validity (json.loads, and the task's JSON Schema) and
  content accuracy (the parsed value equals the reference). Answer lengths: short tasks
  24, `count` 64, JSON tasks 48 (ANSWER_REGION); blocks of 8. `goal` compares every
  setting with the baseline (threshold 0.9, no cache, no smoothing) on `count`.
- `infill`: held-out infill examples decoded on the model's forward in the engine's
  canvas with each example's span (dinfer_training/model_checks.py): exact match per source.
- `repair`: held-out answers with 2 random tokens, one forward: how many the model
  restores, and how often it would confidently replace a correct token.
- `constrained`: the JSON tasks decoded free and with each task's JSON Schema as a
  constraint (dinfer_engine/constraints/, threshold 0.9): validity, content accuracy, tokens/s.
- `engine_infill`: held-out infill examples through the engine (`dinfer_engine.Infill`, threshold
  0.9): exact match with a fixed span of INFILL_SPAN, with the length search ("auto":
  INFILL_SPAN and its halvings down to 8), and with each example's own span.
- `editing`: the completion tasks with plain threshold decoding (0.9) against LLaDA2.1's
  token editing in its Speed and Quality presets (dinfer_engine/decoding/editing.py): accuracy,
  content TPF, forwards per sample, tokens/s.
`comparison`: each model's per-task accuracy (baseline setting) against the first model's.

    python benchmarks/demo_eval.py --per-task 100
    python benchmarks/demo_eval.py --per-task 20 --decoders threshold credit --caches dual
    python benchmarks/demo_eval.py --models /tmp/demo-v2/models/demo dinfer_models/demo \
        --per-task 200 --decoders threshold --caches none --smoothing plain
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from dinfer_engine import Engine, GenerationConfig, GenerationResult, Infill
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.request import GenerationRequest
from dinfer_training.json_tasks import JSON_SCHEMAS, parse_json, same_content
from dinfer_training.model_checks import Encode, Special, infill_scores, repair_scores
from dinfer_training.tasks import (
    ANSWER_REGION,
    EVAL_SEED,
    HELD_OUT_PER_TASK,
    TASKS,
    Example,
    check,
    eval_set,
    held_out,
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
COMPLETION_TASKS = tuple(task for task in TASKS if task != "infill")
INFILL_SPAN = 32
EDITING = {"threshold": dict(decoder="threshold", threshold=0.9),
           "speed": dict(preset="speed"), "quality": dict(preset="quality")}


def content_tokens(result: GenerationResult) -> int:
    return result.completion_tokens + (result.finish_reason == "stop")


def json_scores(examples: list[Example], texts: list[str]) -> dict[str, dict[str, float]]:
    """Per JSON task: share of outputs that parse, that satisfy the task's schema, and
    whose value equals the reference answer's."""
    import jsonschema  # type: ignore[import-untyped]

    counts: dict[str, list[int]] = {}
    for ex, text in zip(examples, texts, strict=True):
        if ex.task not in JSON_SCHEMAS:
            continue
        value = parse_json(text)
        valid = value is not None and jsonschema.Draft202012Validator(
            JSON_SCHEMAS[ex.task]).is_valid(value)
        row = counts.setdefault(ex.task, [0, 0, 0, 0])
        for i, hit in enumerate((True, value is not None, valid, same_content(ex, text))):
            row[i] += hit
    return {task: {"parses": round(p / n, 4), "schema_valid": round(v / n, 4),
                   "content_accuracy": round(c / n, 4)}
            for task, (n, p, v, c) in counts.items()}


def supported(engine: Engine, ex: Example) -> bool:
    """The model's vocabulary has every character of the example (demo v2 has no JSON)."""
    vocab = engine.tokenizer.get_vocab()
    return all(c in vocab for c in ex.prompt + ex.answer + ex.suffix)


def evaluate(engine: Engine, examples: list[Example], fields: dict,
             batch_size: int, constrained: bool = False) -> dict[str, object]:
    """`constrained`: each JSON example's answer held to its task's schema."""
    by_length: dict[int, list[Example]] = {}
    for ex in examples:
        by_length.setdefault(ANSWER_REGION[ex.task], []).append(ex)
    per_task = {task: {"correct": 0, "n": 0, "content": 0, "forwards": 0} for task in TASKS}
    started = time.perf_counter()
    outputs: list[tuple[Example, str]] = []
    for gen_length, group in by_length.items():
        config = GenerationConfig(gen_length=gen_length, block_length=BLOCK_LENGTH,
                                  steps=gen_length, max_batch_size=batch_size, **fields)
        results = engine.generate([GenerationRequest(ex.prompt, constraint=ConstraintSpec
                                                     .json_schema(JSON_SCHEMAS[ex.task])
                                                     if constrained else None)
                                   for ex in group], config)
        for ex, res in zip(group, results, strict=True):
            outputs.append((ex, res.text))
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
        "json": json_scores([ex for ex, _ in outputs], [text for _, text in outputs]),
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


def section_tasks(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    tasks = [t for t in args.tasks if t in COMPLETION_TASKS]
    examples = eval_set(args.per_task, tuple(tasks))
    kept = [ex for ex in examples if supported(engine, ex)]
    settings: dict[str, dict] = {}
    for decoder, cache, smoothing in itertools.product(args.decoders, args.caches,
                                                        args.smoothing):
        fields = {**DECODERS[decoder], **CACHES[cache], "smoothing": smoothing == "smooth"}
        settings[f"{decoder}/{cache}/{smoothing}"] = evaluate(engine, kept, fields,
                                                              args.batch_size)
    return {
        "samples": len(kept), "unsupported_tasks": sorted({ex.task for ex in examples}
                                                          - {ex.task for ex in kept}),
        "answer_length": {t: ANSWER_REGION[t] for t in tasks},
        "settings": settings, "goal": goal(settings),
    }


def special_ids(engine: Engine) -> tuple[Special, Encode, Callable[[list[int]], str]]:
    vocab = engine.tokenizer.get_vocab()
    special = Special(pad=engine.tokenizer.pad_token_id, eos=engine.eos_id,
                      mask=engine.mask_id, vocab_size=len(vocab))
    return special, lambda text: [vocab[c] for c in text], engine.tokenizer.decode


def section_infill(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    examples = [ex for ex in held_out()["infill"][:args.per_task] if supported(engine, ex)]
    if not examples:
        return {"samples": 0}
    special, encode, decode = special_ids(engine)
    return infill_scores(engine.model, encode, decode, special, examples)


def section_repair(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    tasks = tuple(t for t in args.tasks if t in COMPLETION_TASKS)
    examples = [ex for ex in eval_set(args.per_task, tasks) if supported(engine, ex)]
    special, encode, _ = special_ids(engine)
    return repair_scores(engine.model, encode, special, examples)


def section_constrained(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    examples = [ex for ex in eval_set(args.per_task, tuple(JSON_SCHEMAS))
                if supported(engine, ex)]
    if not examples:
        return {"samples": 0}
    return {"samples": len(examples), **{
        name: evaluate(engine, examples, DECODERS["threshold"], args.batch_size, constrained)
        for name, constrained in (("free", False), ("constrained", True))}}


def section_engine_infill(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    examples = [ex for ex in held_out()["infill"][:args.per_task] if supported(engine, ex)]
    if not examples:
        return {"samples": 0}
    config = GenerationConfig(gen_length=INFILL_SPAN, block_length=BLOCK_LENGTH,
                              max_batch_size=args.batch_size, **DECODERS["threshold"])
    ways = {"fixed_span": lambda ex: Infill([ex.prompt, ex.suffix]),
            "length_search": lambda ex: Infill([ex.prompt, ex.suffix], lengths="auto"),
            "given_span": lambda ex: Infill([ex.prompt, ex.suffix], spans=[ex.span])}
    report: dict[str, object] = {"samples": len(examples), "span": INFILL_SPAN}
    for name, prompt in ways.items():
        started = time.perf_counter()
        results = engine.generate([prompt(ex) for ex in examples], config)
        report[name] = {
            "exact_match": round(sum(r.text == ex.answer for r, ex
                                     in zip(results, examples, strict=True)) / len(examples), 4),
            "forwards_per_sample": round(sum(r.nfe for r in results) / len(examples), 2),
            "seconds": round(time.perf_counter() - started, 2)}
    return report


def section_editing(engine: Engine, args: argparse.Namespace) -> dict[str, object]:
    tasks = tuple(t for t in args.tasks if t in COMPLETION_TASKS)
    examples = [ex for ex in eval_set(args.per_task, tasks) if supported(engine, ex)]
    return {"samples": len(examples), **{
        name: evaluate(engine, examples, fields, args.batch_size)
        for name, fields in EDITING.items()}}


SECTIONS: dict[str, Callable[[Engine, argparse.Namespace], dict[str, object]]] = {
    "tasks": section_tasks, "infill": section_infill, "repair": section_repair,
    "constrained": section_constrained, "engine_infill": section_engine_infill,
    "editing": section_editing,
}


def comparison(models: dict[str, dict]) -> dict[str, object]:
    """Per task, each model's accuracy in the baseline setting minus the first model's,
    in points."""
    rows = {name: report["tasks"]["settings"].get(BASELINE, {}).get("per_task_accuracy", {})
            for name, report in models.items() if "tasks" in report}
    if len(rows) < 2:
        return {}
    (first, base), *others = rows.items()
    return {"against": first, "setting": BASELINE, "points": {
        name: {t: round(100 * (acc[t] - base[t]), 2) for t in acc if t in base}
        for name, acc in others}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="+", type=Path, default=[Path("dinfer_models/demo")],
                    help="model directories, evaluated one after the other on the same prompts")
    ap.add_argument("--per-task", type=int, default=100,
                    help=f"held-out prompts per task (at most {HELD_OUT_PER_TASK})")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--sections", nargs="*", default=list(SECTIONS), choices=SECTIONS)
    ap.add_argument("--decoders", nargs="*", default=list(DECODERS), choices=DECODERS)
    ap.add_argument("--caches", nargs="*", default=list(CACHES), choices=CACHES)
    ap.add_argument("--smoothing", nargs="*", default=["plain", "smooth"],
                    choices=["plain", "smooth"])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, help="torch intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models: dict[str, dict] = {}
    for path in args.models:
        engine = Engine.from_pretrained(path)
        models[str(path)] = {name: SECTIONS[name](engine, args) for name in args.sections}
    print(json.dumps({
        "held_out_seed": EVAL_SEED, "per_task": args.per_task, "block_length": BLOCK_LENGTH,
        "batch_size": args.batch_size, "models": models, "comparison": comparison(models),
    }, indent=2))


if __name__ == "__main__":
    main()
