"""Where one engine iteration's time goes on the torch path, at a scaled LLaDA shape with
LLaDA's real 126,464-token vocabulary: the trunk (dual-cache block span, and a full-row
block-start forward), the LM head matmul, and decoders.sample (float64 softmax statistics
and argmax / Gumbel-max). The span forward attends to the KV cache in place (ADR 014;
benchmarks/kv_cache_bench.py measures that part). Prints one JSON object: median
milliseconds per stage, each stage's share of a dual-cache iteration, and the bytes of
the logits and their float64 copy that the fused kernel (dinfer_kernels.lm_head_confidence)
never writes.

    python benchmarks/iteration_profile.py                      # CPU, scaled model
    python benchmarks/iteration_profile.py --device cuda --d-model 4096 --layers 32 --rows 64
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.kv_cache_bench import seconds  # noqa: E402
from benchmarks.random_model_bench import LLADA_8B, random_model  # noqa: E402
from dinfer_engine.decoding.decoders import sample  # noqa: E402
from dinfer_engine.models.kv_cache import KVCache  # noqa: E402


def median_ms(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    return round(seconds(fn, device, repeats) * 1e3, 2)


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16, help="batch size")
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--columns", type=int, default=192, help="prompt + answer length")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    d = args.d_model
    shape = {**LLADA_8B, "d_model": d, "n_layers": args.layers, "n_heads": d // 128,
             "n_kv_heads": d // 128, "mlp_hidden_size": 3 * d}
    model = random_model(shape, device, dtype)
    vocab, mask_id = shape["vocab_size"], shape["mask_token_id"]
    rows, block = args.rows, args.block_length
    ids = torch.randint(0, mask_id, (rows, args.columns), device=device)
    block_index = torch.arange(block, device=device).expand(rows, -1)
    every_row = torch.arange(rows, device=device)
    cache = KVCache(args.layers)
    cache.resize(every_row[:0], rows, args.columns)
    model(ids, cache=cache, cache_rows=every_row, store_cache=True, logits_index=block_index)
    span_mask = torch.ones(rows, args.columns + block, dtype=torch.bool, device=device)
    span_mask[:, :block] = False  # the recomputed block's stale cached columns
    hidden = model(ids[:, :block], return_hidden=True).hidden
    logits = F.linear(hidden, model.head_weight())
    generators = [torch.Generator(device).manual_seed(i) for i in range(rows)]
    stages = {
        "trunk_dual_block_span": lambda: model(
            ids[:, :block], attention_mask=span_mask, cache=cache, cache_rows=every_row,
            logits_index=block_index, return_hidden=True),
        "trunk_full_row": lambda: model(ids, logits_index=block_index, return_hidden=True),
        "lm_head_matmul": lambda: F.linear(hidden, model.head_weight()),
        "sample_greedy": lambda: sample(logits, 0.0, generators, mask_id),
        "sample_temperature_1": lambda: sample(logits, 1.0, generators, mask_id),
    }
    ms = {name: median_ms(fn, device, args.repeats) for name, fn in stages.items()}
    dual = ms["trunk_dual_block_span"] + ms["lm_head_matmul"] + ms["sample_greedy"]
    positions = rows * block
    print(json.dumps({
        "device": str(device), "dtype": str(dtype), "threads": torch.get_num_threads(),
        "shape": {"d_model": d, "layers": args.layers, "mlp_hidden": 3 * d, "vocab": vocab,
                  "rows": rows, "block_length": block, "columns": args.columns},
        "ms": ms,
        "share_of_greedy_dual_iteration": {
            "trunk": round(ms["trunk_dual_block_span"] / dual, 3),
            "lm_head_matmul": round(ms["lm_head_matmul"] / dual, 3),
            "sample_greedy": round(ms["sample_greedy"] / dual, 3)},
        "bytes_not_written_by_fused_head": {
            "logits": positions * vocab * logits.element_size(),
            "float64_copy": positions * vocab * 8,
            "hidden_read_instead": positions * d * hidden.element_size()},
        "kv_cache_bytes": sum(t.numel() * t.element_size() for t in cache.keys + cache.values
                              if t is not None),
    }, indent=1))


if __name__ == "__main__":
    main()
