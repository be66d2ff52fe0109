"""The prompt prefix cache of block diffusion (engine/prefix_cache.py) on a random LLaDA2
or (--family diffusion_gemma, engine/encoder_prefix.py) DiffusionGemma checkpoint:
`--rows` prompts sharing a `--prefix`-token prefix plus `--distinct` tokens of their own,
decoded by an engine with the cache and by one without, against as many distinct prompts
of the same length; the same answer length throughout.

Prints one JSON object: per run, the engine's answer tokens per second of wall time and
of the process's CPU time (steadier on a machine others load), the prompt tokens the
cache gave back (prefix_tokens_reused) and the process's peak memory (CPU: peak RSS;
CUDA: peak allocated), each run in a child process of its own so that peaks are its own;
and the ratio of tokens/s with the cache to without it, for a first generate call (one
row of the batch computes the prefix, the rest reuse it) and for a second call on the same
engine (every row reuses it), and to distinct prompts of the same length.

    python benchmarks/prefix_cache_bench.py                   # 64 x (512 + 16), CPU
    python benchmarks/prefix_cache_bench.py --prefix 2048 --rows 16
    python benchmarks/prefix_cache_bench.py --family diffusion_gemma --tree /tmp/main

--tree: also decode the distinct prompts without a cache with another checkout's engine
(main's), in the same run: distinct prompts must not be slower here than there.
DiffusionGemma's answers are one canvas of --block-length tokens per --gen-length, in
--steps denoising steps (adaptive stopping off).

The model is random (answers are meaningless, so the `fixed` decoder gives every run the
same forwards: --steps per answer, about what a trained LLaDA2 takes with its threshold
decoder); its size is set by --hidden / --layers (default: a small one that runs in
minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


VOCAB = (5, 40)  # token ids the character tokenizer maps to characters


def write_model(directory: Path, args: argparse.Namespace) -> Path:
    from tests.tiny_diffusion_gemma import GENERATION_CONFIG, write_tiny_diffusion_gemma
    from tests.tiny_moe import write_tiny_moe

    hidden, layers, heads = args.hidden, args.layers, args.hidden // 64
    if args.family == "diffusion_gemma":
        return write_tiny_diffusion_gemma(
            directory, shape="moe", hidden=hidden, num_hidden_layers=layers,
            layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
            num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), head_dim=64,
            global_head_dim=128, num_global_key_value_heads=max(1, heads // 4),
            num_experts=16, top_k_experts=4, sliding_window=128, vocab_size=64,
            canvas_length=args.block_length, max_position_embeddings=8192,
            generation={**GENERATION_CONFIG, "max_denoising_steps": args.steps})
    return write_tiny_moe(directory, "llada2", hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                          head_dim=64, first_k_dense_replace=1, intermediate_size=4 * hidden,
                          num_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
                          moe_intermediate_size=hidden, num_nextn_predict_layers=0,
                          max_position_embeddings=8192, vocab_size=64)


def prompts(rows: int, prefix: int, distinct: int, shared: bool) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)

    def tokens(n: int) -> list[int]:
        return torch.randint(*VOCAB, (n,), generator=generator).tolist()

    common = tokens(prefix)
    return [(common if shared else tokens(prefix)) + tokens(distinct) for _ in range(rows)]


def peak_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One engine (cache on or off) on one prompt set, two generate calls."""
    sys.path.insert(0, str(args.tree or REPO))
    from engine import Engine, GenerationConfig

    torch.set_num_threads(args.threads)
    budget = args.budget_mb * 2**20 if args.cache == "on" else 0
    engine = Engine.from_pretrained(args.model, device=args.device, prefix_cache_bytes=budget)
    config = GenerationConfig(gen_length=args.gen_length, early_stop=False,
                              max_batch_size=args.rows) \
        if args.family == "diffusion_gemma" else \
        GenerationConfig(gen_length=args.gen_length, block_length=args.block_length,
                         decoder="fixed", steps=args.steps, early_stop=False,
                         max_batch_size=args.rows, max_batch_tokens=1 << 30)
    batch = prompts(args.rows, args.prefix, args.distinct, args.prompts == "shared")
    calls = []
    for _ in range(2 if args.cache == "on" else 1):  # without a cache, calls cost the same
        start, cpu_start = time.perf_counter(), time.process_time()
        results = engine.generate(batch, config)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        tokens = sum(r.completion_tokens for r in results)
        calls.append({"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3),
                      "tokens_per_s": round(tokens / seconds, 1),
                      "tokens_per_cpu_s": round(tokens / cpu_seconds, 1),
                      "nfe": sum(r.nfe for r in results),
                      "prefix_tokens_reused": sum(r.prefix_tokens_reused or 0
                                                  for r in results)})
    return {"cache": args.cache, "prompts": args.prompts, "first_call": calls[0],
            "second_call": calls[-1], "prefix_cache": engine.prefix_cache_stats(),
            "peak_memory_mb": round(peak_mb(args.device), 1)}


def child(args: argparse.Namespace, cache: str, kind: str, tree: Path | None = None
          ) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--cache", cache, "--prompts", kind]
    for name in ("model", "device", "rows", "prefix", "distinct", "gen_length",
                 "block_length", "steps", "budget_mb", "threads", "family"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--tree", str(tree)] if tree is not None else []
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=("llada2", "diffusion_gemma"), default="llada2")
    parser.add_argument("--model", type=Path, help="a checkpoint of --family (default: random)")
    parser.add_argument("--tree", type=Path, help="another checkout (main) to compare")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prefix", type=int, default=512)
    parser.add_argument("--distinct", type=int, default=16)
    parser.add_argument("--gen-length", type=int, default=32)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="forwards per answer")
    parser.add_argument("--budget-mb", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--with-distinct", action="store_true",
                        help="also run distinct prompts with the cache (no reuse: its cost)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--prompts", choices=("shared", "distinct"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        if args.model is None:
            args.model = write_model(Path(scratch) / args.family, args)
        kinds = [("shared", "on"), ("shared", "off")]
        runs = {f"{kind}_{cache}": child(args, cache, kind)
                for kind, cache in kinds + [("distinct", "on")] * args.with_distinct}
        if args.tree is not None:
            runs["distinct_off"] = child(args, "off", "distinct")
            runs["distinct_off_tree"] = child(args, "off", "distinct", args.tree)
    on, off = runs["shared_on"], runs["shared_off"]
    distinct = runs.get("distinct_on", off)  # shared prompts without a cache cost the same
    print(json.dumps({
        "setup": {"family": args.family, "rows": args.rows, "prefix": args.prefix,
                  "distinct": args.distinct,
                  "gen_length": args.gen_length, "block_length": args.block_length,
                  "steps": args.steps, "hidden": args.hidden, "layers": args.layers,
                  "device": args.device, "threads": args.threads},
        "speedup": {f"{call}_{rate}": round(on[call][rate] / off[call][rate], 2)
                    for call in ("first_call", "second_call")
                    for rate in ("tokens_per_s", "tokens_per_cpu_s")},
        "speedup_over_distinct_prompts": round(
            on["first_call"]["tokens_per_s"] / distinct["first_call"]["tokens_per_s"], 2),
        **({"distinct_prompts_over_tree": round(
            runs["distinct_off"]["first_call"]["tokens_per_s"]
            / runs["distinct_off_tree"]["first_call"]["tokens_per_s"], 2)}
           if args.tree is not None else {}),
        "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
