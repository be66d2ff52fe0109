"""What the KV cache costs one forward at long prompts (ADR 014): time and bytes allocated
by a span forward that reads the cache (prefix / dual / vicinity: the block's span
attends to the cached columns and itself) and one that writes into it (block diffusion,
LLaDA2: the span goes into its own columns and attends to the row), on random layers in
a real model's shape (LLaDA-8B by default, a few of its layers: every figure is per
layer). The span forward leaves out `--absent` rows spread over the batch, as when they
start a block and run in full. Bytes: every allocation during the forward, from torch's
profiler (profile_memory), CPU only; on CUDA the peak allocated above the start.

Prints one JSON object. With --baseline DIR it measures another checkout too (e.g. the
previous commit: `git worktree add /tmp/base HEAD~1`), in a child process that imports
DIR's engine, and reports both side by side with the ratios.

    python benchmarks/kv_cache_bench.py                        # 2 LLaDA-8B layers, 16 x 1024
    python benchmarks/kv_cache_bench.py --baseline /tmp/base --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]


def allocated_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())


def seconds(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def measure(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(args.tree or REPO))
    from dinfer_engine.models.kv_cache import KVCache  # the measured checkout's

    sys.path.insert(1, str(REPO))
    from benchmarks.random_model_bench import SHAPES, random_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = {**SHAPES[args.shape], "n_layers": args.layers, "num_hidden_layers": args.layers,
             "vocab_size": 1024, "embedding_size": 1024, "mask_token_id": 1000,
             "eos_token_id": 1001, "pad_token_id": 1001}
    model = random_model(shape, device, dtype)
    cfg = model.config
    rows, width, span = args.rows, args.columns, args.span
    absent = {int((i + 0.5) * rows / args.absent) for i in range(args.absent)}
    present = torch.tensor([i for i in range(rows) if i not in absent], device=device)
    n = len(present)
    cache = KVCache(cfg.n_layers)
    cache.resize(torch.arange(0, device=device), rows, width)
    every_row = torch.arange(rows, device=device)
    for layer in range(cfg.n_layers):
        k = torch.randn(rows, cfg.n_kv_heads, width, cfg.head_dim, device=device, dtype=dtype)
        cache.store(layer, k, torch.randn_like(k), every_row)
    ids = torch.randint(0, 1000, (n, span), device=device)
    start = width - 4 * span  # the block: four blocks before the row's end
    positions = (start + torch.arange(span, device=device)).expand(n, -1)
    read_mask = torch.ones(n, width + span, dtype=torch.bool, device=device)
    read_mask[:, start:start + span] = False  # the block's stale cached columns

    def read() -> None:
        model(ids, position_ids=positions, attention_mask=read_mask, cache=cache,
              cache_rows=present, logits_index=torch.zeros_like(ids[:, :1]),
              return_hidden=True)

    key_columns = torch.arange(width, device=device)
    write_mask = (key_columns < start + span).expand(n, 1, span, -1)

    def write() -> None:
        model(ids, position_ids=positions, attention_mask=write_mask, cache=cache,
              cache_rows=present, cache_columns=positions,
              logits_index=torch.zeros_like(ids[:, :1]), return_hidden=True)

    report: dict[str, Any] = {}
    for name, fn in (("read", read), ("write", write)):
        fn()  # warm-up (a cache with room for the span grows it here, once)
        report[name] = {"ms": round(seconds(fn, device, args.repeats) * 1e3, 1),
                        "allocated_mb": round(allocated_bytes(fn, device) / 2**20, 1)}
    cache_bytes = sum(t.numel() * t.element_size() for t in cache.keys + cache.values
                      if t is not None)
    report["kv_cache_mb"] = round(cache_bytes / 2**20, 1)
    return report


def child(args: argparse.Namespace, tree: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--tree", str(tree)]
    for name in ("device", "shape", "layers", "rows", "columns", "span", "absent", "repeats",
                 "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="llada-8b", help="a shape of random_model_bench")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--columns", type=int, default=1024, help="the batch's width")
    parser.add_argument("--span", type=int, default=32, help="columns a forward computes")
    parser.add_argument("--absent", type=int, default=2,
                        help="rows left out of the span forward (at a block start)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure alongside")
    args = parser.parse_args()
    settings = {k: getattr(args, k) for k in ("device", "shape", "layers", "rows", "columns",
                                              "span", "absent", "repeats", "threads")}
    if args.tree is not None:
        print(json.dumps(measure(args)))
        return
    if args.baseline is None:
        print(json.dumps({"settings": settings, "this": measure(args)}, indent=1))
        return
    base, this = child(args, args.baseline), child(args, REPO)
    ratios = {name: {"speed_up": round(base[name]["ms"] / this[name]["ms"], 2),
                     "allocated_ratio": round(this[name]["allocated_mb"]
                                              / base[name]["allocated_mb"], 4)}
              for name in ("read", "write")}
    print(json.dumps({"settings": settings, "baseline": {"tree": str(args.baseline), **base},
                      "this": this, "this_over_baseline": ratios}, indent=1))


if __name__ == "__main__":
    main()
