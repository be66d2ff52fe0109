"""DiffusionGemma: the engine against transformers' `DiffusionGemmaForBlockDiffusion.generate`
on one random checkpoint, at batch 1 and --batch-size, in one run.

Prints one JSON object with, per batch size and side: answer tokens/s (non-pad answer
tokens, as transformers counts them, over wall seconds), tokens per forward (the same
tokens over decoder forwards, per row, averaged) and seconds; and the engine's speed-up.

    python benchmarks/diffusion_gemma_bench.py                  # ~100M parameters
    python benchmarks/diffusion_gemma_bench.py --layers 2 --batch-size 8   # a quick look
    python benchmarks/diffusion_gemma_bench.py --device cuda --dtype bfloat16   # a GPU
    python benchmarks/diffusion_gemma_bench.py --tree main=/tmp/main --tree branch=.
    python benchmarks/diffusion_gemma_bench.py --tensor-parallel 2   # also TP 2's engine

--tree NAME=DIR (repeatable) runs the engine side of each checkout DIR in a child
process on the same checkpoint and prompts (each tree's figures, its speed-up over
transformers, and whether its tokens equal the first tree's); without it, this checkout
in this process. --tensor-parallel N adds this checkout's engine at N ranks (CPU: gloo;
CUDA: GPUs 0..N-1) and whether its tokens equal one rank's.

The checkpoint (tests/tiny_diffusion_gemma.py's maker, widths below) is written with
transformers' own classes to a temporary directory. Prompts have one length (transformers'
batch then needs no padding); every row has its own seed on the engine's side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.* and training.* when run as a script

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from tests.tiny_diffusion_gemma import GENERATION_CONFIG, write_tiny_diffusion_gemma  # noqa: E402
from tests.tiny_model import PAD_ID  # noqa: E402


def engine_side(engine: Engine, prompts: list[list[int]], gen_length: int) -> dict[str, Any]:
    """Figures, and the answers' token ids under "token_ids"."""
    start = time.perf_counter()
    results = engine.generate(prompts, GenerationConfig(gen_length=gen_length,
                                                        max_batch_size=len(prompts),
                                                        early_stop=False),
                              seeds=list(range(len(prompts))))
    synchronize(engine.device)
    seconds = time.perf_counter() - start
    tokens = [sum(t != PAD_ID for t in r.token_ids) for r in results]
    return {**figures(tokens, [r.nfe for r in results], seconds),
            "token_ids": [r.token_ids for r in results]}


# another checkout's engine side, run with that checkout first on the path (its Engine
# API: from_pretrained, generate with seeds, as here)
TREE_SIDE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from dinfer_engine import Engine
sys.path.insert(0, sys.argv[2])
from benchmarks.diffusion_gemma_bench import engine_side
torch.set_grad_enabled(False)
args = json.loads(sys.argv[3])
engine = Engine.from_pretrained(args["model"], device=args["device"], dtype=args["dtype"])
print(json.dumps({size: engine_side(engine, prompts, args["gen_length"])
                  for size, prompts in args["prompts"].items()}))
"""


def tree_sides(tree: str, job: dict[str, Any]) -> dict[str, Any]:
    """Every batch size's engine side of checkout `tree` (a child process)."""
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", TREE_SIDE, tree, str(REPO), json.dumps(job)],
                          capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def transformers_side(model: Any, prompts: list[list[int]], gen_length: int
                      ) -> dict[str, Any]:
    torch.manual_seed(0)
    device = next(model.parameters()).device
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(torch.tensor(prompts, device=device), max_new_tokens=gen_length)
    synchronize(device)
    seconds = time.perf_counter() - start
    answers = out.sequences[:, len(prompts[0]):]
    tokens = (answers != PAD_ID).sum(-1).tolist()
    forwards = [n / per if per > 0 else 0 for n, per in
                zip(tokens, out.tokens_per_forward.tolist(), strict=True)]
    return figures(tokens, forwards, seconds)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def figures(tokens: list[int], forwards: list[float], seconds: float) -> dict[str, Any]:
    return {"tokens_per_s": round(sum(tokens) / seconds, 2),
            "tokens_per_forward": round(sum(t / f for t, f in zip(tokens, forwards,
                                                                  strict=True))
                                        / len(tokens), 3),
            "seconds": round(seconds, 2), "answer_tokens": sum(tokens)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--canvas-length", type=int, default=32)
    parser.add_argument("--gen-length", type=int, default=32)
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="max_denoising_steps")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="both sides' weights")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                        help="the engine side of checkout DIR (repeatable)")
    parser.add_argument("--tensor-parallel", type=int, default=1)
    args = parser.parse_args()
    from transformers import DiffusionGemmaForBlockDiffusion

    torch.set_grad_enabled(False)
    kinds = ["sliding_attention"] * (args.layers - 1) + ["full_attention"]
    generation = {**GENERATION_CONFIG, "max_denoising_steps": args.steps}
    trees = dict(tree.split("=", 1) for tree in args.tree)
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_tiny_diffusion_gemma(
            Path(tmp), shape="moe", generation=generation, hidden=args.hidden,
            canvas_length=args.canvas_length, num_hidden_layers=args.layers,
            layer_types=kinds, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
            global_head_dim=128, num_global_key_value_heads=2, num_experts=8,
            top_k_experts=2, sliding_window=128, vocab_size=args.vocab,
            max_position_embeddings=max(512, args.prompt_length + args.gen_length))
        dtype = getattr(torch, args.dtype)
        engine = None if trees else Engine.from_pretrained(directory, device=args.device,
                                                           dtype=dtype)
        reference = DiffusionGemmaForBlockDiffusion.from_pretrained(
            directory, dtype=dtype).to(args.device).eval()
        parameters = sum(p.numel() for n, p in reference.named_parameters()
                         if "vision" not in n)
        report: dict[str, Any] = {"parameters": parameters, "threads": torch.get_num_threads(),
                                  "settings": vars(args), "batches": {}}
        for size in sorted({1, args.batch_size}):
            prompts = [[4 + (row * 31 + i * 7) % (args.vocab - 4)
                        for i in range(args.prompt_length)] for row in range(size)]
            job = {"model": str(directory), "device": args.device, "dtype": args.dtype,
                   "gen_length": args.gen_length, "prompts": {str(size): prompts}}
            sides = {name: tree_sides(tree, job)[str(size)] for name, tree in trees.items()} \
                if trees else {"engine": engine_side(engine, prompts, args.gen_length)}
            if args.tensor_parallel > 1:
                with Engine.from_pretrained(directory, device=args.device, dtype=dtype,
                                            tensor_parallel=args.tensor_parallel) as split:
                    sides[f"tp{args.tensor_parallel}"] = engine_side(split, prompts,
                                                                     args.gen_length)
            theirs = transformers_side(reference, prompts, args.gen_length)
            first = next(iter(sides.values()))["token_ids"]
            report["batches"][str(size)] = {"transformers": theirs, **{
                name: {**{k: v for k, v in side.items() if k != "token_ids"},
                       "speedup": round(side["tokens_per_s"] / theirs["tokens_per_s"], 2),
                       "same_tokens_as_first": side["token_ids"] == first}
                for name, side in sides.items()}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
