"""What the sampling controls cost (docs/adr/060-sampling-controls.md).

Prints one JSON object:
- "generate": seconds (median of --repeats) for the same prompts with no control and
  with each control on every row (the fixed decoder, no early stop: the same forwards
  for every run), and the overhead over the neutral run. A neutral run builds nothing
  (RowControls.of is None), so its figure is the engine's as before. On CUDA a
  controlled run takes the logits path instead of the fused LM head: its overhead
  includes that.
- "apply": one step's RowControls.apply on synthetic logits [--rows, --block, --vocab]
  whose answers hold --answer tokens each: milliseconds, and the bytes of the largest
  temporaries it makes beside the logits' own.

    python benchmarks/sampling_controls_bench.py                  # the demo model, CPU
    python benchmarks/sampling_controls_bench.py --device cuda --vocab 262144
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.batch import Layout, Request, RunningBatch  # noqa: E402
from dinfer_engine.canvas.masked import MaskCanvas  # noqa: E402
from dinfer_engine.decoding.controls import RowControls  # noqa: E402
from dinfer_engine.sampling_controls import SamplingControls  # noqa: E402

CONTROLS: dict[str, dict[str, Any]] = {
    "neutral": {},
    "logit_bias": {"logit_bias": {str(i): 1.5 for i in range(5, 45)}},
    "penalties": {"presence_penalty": 0.5, "frequency_penalty": 0.5,
                  "repetition_penalty": 1.2},
    "min_tokens": {"min_tokens": 16},
    "all": {"logit_bias": {"7": 2.0}, "presence_penalty": 0.5, "frequency_penalty": 0.5,
            "repetition_penalty": 1.2, "min_tokens": 16},
}


def timed(engine: Engine, prompts: list[str], config: GenerationConfig, repeats: int
          ) -> float:
    engine.generate(prompts[:2], config)  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.generate(prompts, config)
        if engine.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def generate_figures(args: argparse.Namespace) -> dict[str, Any]:
    engine = Engine.from_pretrained(args.model, device=args.device)
    prompts = [f"add {i} {i + 7}=" for i in range(args.prompts)]
    # no early stop: min_tokens would otherwise lengthen answers (more forwards, not cost)
    base = dict(gen_length=args.gen_length, block_length=args.block_length,
                decoder="fixed", early_stop=False, max_batch_size=args.prompts)
    seconds = {name: timed(engine, prompts, GenerationConfig(**base, **fields), args.repeats)
               for name, fields in CONTROLS.items()}
    neutral = seconds["neutral"]
    return {"device": str(engine.device), "prompts": args.prompts,
            "gen_length": args.gen_length,
            "seconds": {k: round(v, 4) for k, v in seconds.items()},
            "overhead": {k: round(v / neutral - 1, 3) for k, v in seconds.items()
                         if k != "neutral"}}


def apply_figures(args: argparse.Namespace) -> dict[str, Any]:
    """One step's controls on a synthetic batch (every row controlled)."""
    device = torch.device(args.device)
    rows, block, vocab, answer = args.rows, args.block_length, args.vocab, args.answer
    generator = torch.Generator().manual_seed(0)
    controls = SamplingControls(((5, 1.0), (9, -2.0)), 0.5, 0.5, 1.2, 0.0, False, 8)
    requests = [Request(i, [4, 5, 6], None, controls=controls) for i in range(rows)]
    resolved = GenerationConfig(gen_length=answer, block_length=block).resolve({})
    model = SimpleNamespace(config=SimpleNamespace(mask_token_id=3))  # what the canvas reads
    batch = RunningBatch(Layout(answer, block, 3, 0, device), None,
                         MaskCanvas(resolved, model))  # type: ignore[arg-type]
    run = RowControls(requests, [1])
    run.setup(batch)
    batch.add(requests)
    start = (batch.pad + batch.prompt_length)[:, None]
    columns = start + torch.arange(answer - block, device=device)
    held = torch.randint(4, vocab, (rows, answer - block), generator=generator).to(device)
    batch.ids.scatter_(1, columns, held)  # all but the last block committed
    batch.block += answer // block - 1
    logits = torch.randn(rows, block, vocab, generator=generator).to(device)
    run.apply(logits, batch)  # warm
    if device.type == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(args.repeats):
        begin = time.perf_counter()
        run.apply(logits, batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - begin)
    held_pairs = rows * (answer - block)
    return {"rows": rows, "block": block, "vocab": vocab, "answer": answer,
            "ms": round(1000 * statistics.median(times), 3),
            "logits_bytes": logits.numel() * logits.element_size(),
            # the penalties' [pairs, block] values (a few tensors of them) at most
            "temporaries_bytes_bound": 8 * 8 * held_pairs * block}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(REPO / "dinfer_models" / "demo"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=126464)
    parser.add_argument("--answer", type=int, default=256)
    args = parser.parse_args()
    print(json.dumps({"generate": generate_figures(args), "apply": apply_figures(args)},
                     indent=2))


if __name__ == "__main__":
    main()
