"""LLaDA2.1's token editing against plain threshold decoding, on one checkpoint, in one run.

Prints one JSON object:
- "modes": for plain threshold decoding (the family's threshold rule at --threshold), the
  Speed and Quality presets and the editing decoder's own defaults: exact-match accuracy
  on the demo tasks' held-out prompts (dinfer_training/tasks.py eval_set), content tokens per
  forward (answer tokens up to and including the first EOS, per forward), content
  tokens/s at --batch-size rows, tokens edited and post-steps per sample. Accuracy means
  something only on a trained model (the demo retrained with editing noise); on random
  weights it is ~0 and only the speed figures count.
- "throughput": the Speed preset's answer tokens/s at batch 1 and at --batch-size, and
  the slow reference's batch-size-1 loop (tests/editing_reference.py: one sequence,
  the whole window recomputed each step, as the published `generate` runs) on the same
  checkpoint and prompts, with the engine's speed-ups over it.

    python benchmarks/editing_bench.py                      # a random LLaDA2.1-layout model
    python benchmarks/editing_bench.py --model dinfer_models/demo --per-task 50

Without --model a random ~25M-parameter LLaDA2.1-layout checkpoint (LLaDA2's widths of
benchmarks/random_checkpoint.py, 2 layers, model_type llada21_moe) is written to a
temporary directory. Greedy; blocks of --block-length; answer lengths per task as the
demo's (dinfer_training/tasks.py ANSWER_REGION).
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
sys.path.insert(0, str(REPO))  # tests.* and training.* when run as a script

from benchmarks.random_checkpoint import SIZES  # noqa: E402
from dinfer_engine import Engine, GenerationConfig, GenerationResult  # noqa: E402
from dinfer_training.tasks import ANSWER_REGION, TASKS, Example, check, eval_set  # noqa: E402
from tests.editing_reference import llada21_generate  # noqa: E402
from tests.moe_reference import block_causal_mask  # noqa: E402
from tests.tiny_moe import write_tiny_moe  # noqa: E402


def modes(threshold: float) -> dict[str, dict[str, Any]]:
    return {
        "threshold": dict(decoder="threshold", threshold=threshold),
        "speed": dict(preset="speed"),
        "quality": dict(preset="quality"),
        "editing_defaults": dict(decoder="editing", threshold=0.95, editing_threshold=0.9,
                                 max_post_steps=16, num_to_transfer=1),
    }


def content_tokens(result: GenerationResult) -> int:
    return result.completion_tokens + (result.finish_reason == "stop")


def by_length(examples: list[Example]) -> dict[int, list[Example]]:
    groups: dict[int, list[Example]] = {}
    for ex in examples:
        groups.setdefault(ANSWER_REGION[ex.task], []).append(ex)
    return groups


def evaluate(engine: Engine, examples: list[Example], fields: dict[str, Any],
             block_length: int, batch_size: int) -> dict[str, Any]:
    correct = content = forwards = edited = posts = 0
    started = time.perf_counter()
    for gen_length, group in by_length(examples).items():
        config = GenerationConfig(gen_length=gen_length, block_length=block_length,
                                  steps=gen_length, max_batch_size=batch_size, **fields)
        for ex, res in zip(group, engine.generate([ex.prompt for ex in group], config),
                           strict=True):
            correct += check(ex, res.text)
            content += content_tokens(res)
            forwards += res.nfe
            edited += res.edited_tokens or 0
            posts += res.post_steps or 0
    seconds = time.perf_counter() - started
    n = len(examples)
    return {"accuracy": round(correct / n, 4), "content_tpf": round(content / forwards, 3),
            "content_tokens_per_s": round(content / seconds, 1),
            "forwards_per_sample": round(forwards / n, 2),
            "edited_tokens_per_sample": round(edited / n, 2),
            "post_steps_per_sample": round(posts / n, 2), "seconds": round(seconds, 2)}


def reference_forward(engine: Engine, block_length: int) -> Callable[[torch.Tensor],
                                                                     torch.Tensor]:
    """The engine's model over a whole window: block-causal for block diffusion (LLaDA2),
    bidirectional otherwise; no cache."""
    model = engine.model

    def forward(ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(engine.device)
        if not model.family.block_causal:
            return model(ids[None]).logits[0].float().cpu()
        positions = torch.arange(len(ids), device=engine.device)[None]
        mask = block_causal_mask(len(ids), block_length).to(engine.device)[None]
        return model(ids[None], position_ids=positions, attention_mask=mask,
                     logits_index=positions).logits[0].float().cpu()

    return forward


@torch.inference_mode()
def throughput(engine: Engine, examples: list[Example], block_length: int, batch_size: int,
               reference_prompts: int) -> dict[str, Any]:
    """Answer tokens/s (every gen_length column decoded, early stop off, so that the
    engine and the loop decode the same tokens) of the Speed preset."""
    gen_length = 32
    fields = {"preset": "speed", "gen_length": gen_length, "block_length": block_length,
              "early_stop": False}
    pool = [engine.tokenizer(ex.prompt)["input_ids"] for ex in examples]
    prompts = [pool[i % len(pool)] for i in range(batch_size)]
    figures: dict[str, Any] = {"gen_length": gen_length, "preset": "speed"}
    for size in (1, batch_size):
        started = time.perf_counter()
        engine.generate(prompts, GenerationConfig(max_batch_size=size, **fields))
        rate = len(prompts) * gen_length / (time.perf_counter() - started)
        figures[f"engine_batch_{size}_tokens_per_s"] = round(rate, 1)
    resolved = engine.resolve_config(GenerationConfig(**fields))
    forward = reference_forward(engine, block_length)
    few = prompts[:reference_prompts]
    started = time.perf_counter()
    for prompt in few:
        llada21_generate(forward, prompt, gen_length, block_length, resolved.threshold,
                         resolved.editing_threshold, resolved.max_post_steps,
                         resolved.num_to_transfer, absolute_grid=engine.model.family.block_causal)
    reference = len(few) * gen_length / (time.perf_counter() - started)
    figures["reference_loop_batch_1_tokens_per_s"] = round(reference, 1)
    figures["reference_prompts"] = len(few)
    figures["engine_prompts"] = len(prompts)
    for size in (1, batch_size):
        figures[f"speedup_batch_{size}_over_reference"] = round(
            figures[f"engine_batch_{size}_tokens_per_s"] / reference, 2)
    return figures


def random_llada21(directory: Path) -> Path:
    sizes = {**SIZES["llada2"], "num_hidden_layers": 2, "model_type": "llada21_moe"}
    return write_tiny_moe(directory, "llada2", **sizes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, help="checkpoint directory (default: random)")
    ap.add_argument("--per-task", type=int, default=8, help="held-out prompts per task")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--block-length", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threshold", type=float, default=0.9,
                    help="plain threshold decoding's threshold")
    ap.add_argument("--reference-prompts", type=int, default=4,
                    help="prompts the slow reference loop decodes (it is slow)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, help="torch intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or random_llada21(Path(scratch) / "llada21")
        engine = Engine.from_pretrained(model, device=args.device)
        examples = eval_set(args.per_task, tuple(args.tasks))
        results = {name: evaluate(engine, examples, fields, args.block_length,
                                  args.batch_size)
                   for name, fields in modes(args.threshold).items()}
        base = results["threshold"]
        for row in results.values():
            row["tpf_vs_threshold"] = round(row["content_tpf"] / base["content_tpf"], 3)
        print(json.dumps({
            "model": str(args.model or "random LLaDA2.1-layout, 2 layers"),
            "family": type(engine.model).__name__, "device": args.device,
            "samples": len(examples), "block_length": args.block_length,
            "batch_size": args.batch_size, "modes": results,
            "throughput": throughput(engine, examples, args.block_length, args.batch_size,
                                     args.reference_prompts),
        }, indent=2))


if __name__ == "__main__":
    main()
