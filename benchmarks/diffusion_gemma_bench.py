"""DiffusionGemma: the engine against transformers' `DiffusionGemmaForBlockDiffusion.generate`
on one random checkpoint, at each of --batch-sizes, in one run.

Prints one JSON object with, per batch size and side: answer tokens/s (non-pad answer
tokens, as transformers counts them, over wall seconds), tokens per forward (the same
tokens over decoder forwards, per row, averaged), seconds and the side's peak resident
memory (its own process); the engine's speed-up and, with --products, its wall seconds
over its matrix products' seconds (a second, timed run: the products' own time, on a CPU
each operation's own seconds by a clock of its own, which keeps no event per call, on a
GPU the kernels' device time by torch's profiler), the
profiled run's own wall over them, and where the rest of that run went ("rest_seconds":
the other operations with the most own time, and the time outside any operation), and
that run's wall over its network's own seconds ("wall_over_network", CPU: the encoder, the
decoder, the head with its softcap and the self-conditioning product, each call's whole
time; what is left is the sampler's: draws, softmaxes, entropy, argmax, bookkeeping).

    python benchmarks/diffusion_gemma_bench.py                  # ~100M parameters
    python benchmarks/diffusion_gemma_bench.py --layers 2 --batch-sizes 1,8   # a quick look
    python benchmarks/diffusion_gemma_bench.py --device cuda --dtype bfloat16   # a GPU
    python benchmarks/diffusion_gemma_bench.py --tree main=/tmp/main --tree branch=.
    python benchmarks/diffusion_gemma_bench.py --tensor-parallel 2   # also TP 2's engine
    python benchmarks/diffusion_gemma_bench.py --vocab 262144 --canvas-length 256 \
        --gen-length 256 --batch-sizes 1,16,64 --memory-limit-gib 4   # the released shape

Every side runs in a child process per batch size (its peak memory is its own): --tree
NAME=DIR (repeatable) runs the engine of checkout DIR (each tree's figures, its speed-up
over transformers, and whether its tokens equal the first tree's); without it, this
checkout's. On a CPU each child's data may not exceed --memory-limit-gib: a side that
would (transformers and engines that hold [rows, canvas, vocabulary] tensors, at the
released vocabulary) reports that it does not fit instead of its figures.
--tensor-parallel N adds this checkout's engine at N ranks (CPU: gloo; CUDA: GPUs
0..N-1), in this process, and whether its tokens equal one rank's.

The checkpoint (tests/tiny_diffusion_gemma.py's maker, widths below) is written with
transformers' own classes to a temporary directory. Prompts have one length (transformers'
batch then needs no padding); every row has its own seed on the engine's side.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.* and training.* when run as a script

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.request import GenerationRequest  # noqa: E402
from tests.tiny_diffusion_gemma import GENERATION_CONFIG, write_tiny_diffusion_gemma  # noqa: E402
from tests.tiny_model import PAD_ID  # noqa: E402

# the operations whose own time is a matrix product: the linears (on the fixed grid,
# addmm_ accumulations), batched products, and the attention kernels; `linear` and
# `scaled_dot_product_attention` too, which a clock or profiler may see whole, their
# products inside them (under inference mode a dispatch-mode clock sees no `mm` in them)
PRODUCTS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm",
            "aten::linear", "aten::matmul", "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_efficient_attention")
REST_OPS = 12  # the other operations --products lists with their own seconds
# the network's own calls on the engine's side (module, class or None, functions): their
# whole time, products and element-wise work alike, is the network's
NETWORK_CALLS = (("dinfer_engine.models.diffusion_gemma", "DiffusionGemmaLM",
                  ("encode_rows", "denoise", "logits")),
                 ("dinfer_engine.uniform_generation", None, ("expected_embedding",)))
NETWORK = "network"


def engine_side(engine: Engine, prompts: list[list[int]], gen_length: int,
                products: bool = False) -> dict[str, Any]:
    """Figures, and the answers' token ids under "token_ids"; with `products`, a second,
    profiled run's matrix products' seconds and the first run's wall over them."""
    def run() -> tuple[list[Any], float]:
        start = time.perf_counter()
        results = engine.generate([GenerationRequest(p, seed=s) for s, p in enumerate(prompts)],
                                  GenerationConfig(gen_length=gen_length,
                                                   max_batch_size=len(prompts),
                                                   early_stop=False))
        synchronize(engine.device)
        return results, time.perf_counter() - start

    results, seconds = run()
    tokens = [sum(t != PAD_ID for t in r.token_ids) for r in results]
    out = {**figures(tokens, [r.nfe for r in results], seconds),
           "token_ids": [r.token_ids for r in results]}
    if products:
        spent, profiled, network, rest = profiled_seconds(run, engine.device)
        out.update(products_seconds=round(spent, 2),
                   wall_over_products=round(seconds / spent, 2),
                   profiled_wall_over_products=round(profiled / spent, 2), rest_seconds=rest)
        if network:
            out.update(network_seconds=round(network, 2),
                       wall_over_network=round(profiled / network, 2))
    return out


def label_network() -> None:
    """Time each call of NETWORK_CALLS (those this checkout has) into NETWORK_SECONDS,
    once per process (a call wrapped twice would count its time twice)."""
    for module_name, class_name, names in NETWORK_CALLS:
        owner: Any = importlib.import_module(module_name)
        owner = getattr(owner, class_name) if class_name else owner
        for name in names:
            function = getattr(owner, name, None)
            if function is not None and not hasattr(function, NETWORK):
                setattr(owner, name, labelled(function))


NETWORK_SECONDS = [0.0]  # the labelled calls' whole seconds, outermost calls only
_network_depth = [0]


def labelled(function: Any) -> Any:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        _network_depth[0] += 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _network_depth[0] -= 1
            if not _network_depth[0]:
                NETWORK_SECONDS[0] += time.perf_counter() - start
    setattr(call, NETWORK, True)
    return call


class OperationClock(TorchDispatchMode):
    """Each aten operation's own seconds, by name ("aten::mm"), on a CPU, where an
    operation has ended when its call returns. Unlike torch's profiler it keeps no event
    per call, so a run of 48 steps at batch 64 (millions of calls) fits in memory; its
    own cost (a Python call per operation) counts as time outside operations."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = defaultdict(float)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds[func._schema.name] += time.perf_counter() - start
        return out


def profiled_seconds(run: Any, device: torch.device
                     ) -> tuple[float, float, float, dict[str, float]]:
    """From one more run of `run`: the matrix products' own seconds (on a CPU by
    OperationClock, on a GPU their kernels' device time by torch's profiler), that run's
    wall seconds (its ratio to the products', unlike the first run's, is not moved by a
    load that changes between the two runs), and what the rest of its wall time went to:
    the REST_OPS other operations with the most own seconds, the largest first, and
    "outside operations" (Python, numpy's draws, waiting). On a CPU also the network's
    seconds (label_network)."""
    label_network()
    NETWORK_SECONDS[0] = 0.0
    if device.type == "cpu":
        with OperationClock() as clock:
            _, wall = run()
        own = dict(clock.seconds)
        products = sum(own.pop(name, 0.0) for name in PRODUCTS)
        network, inside = NETWORK_SECONDS[0], products + sum(own.values())
    else:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]
                                    ) as profile:
            _, wall = run()
        events = profile.key_averages()
        own = {event.key: event.self_cpu_time_total / 1e6 for event in events
               if event.key not in PRODUCTS}
        products = sum(getattr(event, "self_device_time_total", 0) / 1e6
                       for event in events if event.key in PRODUCTS)
        network, inside = 0.0, sum(event.self_cpu_time_total for event in events) / 1e6
    largest = sorted(own.items(), key=lambda item: -item[1])[:REST_OPS]
    return products, wall, network, {**{key: round(value, 2) for key, value in largest},
                                     "outside operations": round(wall - inside, 2)}


# one side at one batch size in a child process, with checkout sys.argv[1] first on the
# path (its Engine API: from_pretrained, generate with seeds, as here)
SIDE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import dinfer_engine  # the checkout's, before this bench's own checkout comes first
sys.path.insert(0, sys.argv[2])
from benchmarks.diffusion_gemma_bench import engine_side, transformers_side
torch.set_grad_enabled(False)
args = json.loads(sys.argv[3])
dtype = getattr(torch, args["dtype"])
if args["side"] == "transformers":
    from transformers import DiffusionGemmaForBlockDiffusion
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(args["model"], dtype=dtype)
    out = transformers_side(model.to(args["device"]).eval(), args["prompts"],
                            args["gen_length"])
else:
    from dinfer_engine import Engine
    engine = Engine.from_pretrained(args["model"], device=args["device"], dtype=dtype)
    out = engine_side(engine, args["prompts"], args["gen_length"], args["products"])
# its own peak: ru_maxrss would start from the parent's size at the fork
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:")) / 1024
if args["device"].startswith("cuda"):
    out["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2 ** 20)
print(json.dumps({**out, "peak_rss_mib": round(peak)}))
"""


def child_side(tree: str, job: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """One side's figures from a child process whose data may not exceed `limit` bytes
    (None: no limit); {"fits": False, ...} when it ran out of memory."""
    env = {**os.environ, "PYTHONPATH": tree}

    def bounded() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    done = subprocess.run([sys.executable, "-c", SIDE, tree, str(REPO), json.dumps(job)],
                          capture_output=True, text=True, env=env, cwd=tree,
                          preexec_fn=bounded)
    if done.returncode:
        if "allocate" in done.stderr or "MemoryError" in done.stderr:
            return {"fits": False, "memory_limit_gib": (limit or 0) / 2 ** 30,
                    "error": done.stderr.strip().splitlines()[-1][-300:]}
        raise SystemExit(f"{tree} ({job['side']}): {done.stderr[-2000:]}")
    return {"fits": True, **json.loads(done.stdout)}


def transformers_side(model: Any, prompts: list[list[int]], gen_length: int
                      ) -> dict[str, Any]:
    """Figures, and the answers under "token_ids" (at batch 1 the engine's with seed 0)."""
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
    return {**figures(tokens, forwards, seconds), "token_ids": answers.tolist()}


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
    parser.add_argument("--batch-sizes", default="1,64")
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
    parser.add_argument("--memory-limit-gib", type=float, default=4.0,
                        help="each side's data on a CPU (0: none)")
    parser.add_argument("--products", action="store_true",
                        help="also time the engine's matrix products (a profiled run)")
    parser.add_argument("--no-transformers", action="store_true")
    args = parser.parse_args()

    torch.set_grad_enabled(False)
    kinds = ["sliding_attention"] * (args.layers - 1) + ["full_attention"]
    generation = {**GENERATION_CONFIG, "max_denoising_steps": args.steps}
    trees = dict(tree.split("=", 1) for tree in args.tree) or {"engine": str(REPO)}
    limit = int(args.memory_limit_gib * 2 ** 30) \
        if args.device == "cpu" and args.memory_limit_gib > 0 else None
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_tiny_diffusion_gemma(
            Path(tmp), shape="moe", generation=generation, hidden=args.hidden,
            canvas_length=args.canvas_length, num_hidden_layers=args.layers,
            layer_types=kinds, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
            global_head_dim=128, num_global_key_value_heads=2, num_experts=8,
            top_k_experts=2, sliding_window=128, vocab_size=args.vocab,
            max_position_embeddings=max(512, args.prompt_length + args.gen_length))
        dtype = getattr(torch, args.dtype)
        report: dict[str, Any] = {"threads": torch.get_num_threads(),
                                  "settings": vars(args), "batches": {}}
        for size in [int(b) for b in args.batch_sizes.split(",")]:
            prompts = [[4 + (row * 31 + i * 7) % (args.vocab - 4)
                        for i in range(args.prompt_length)] for row in range(size)]
            job = {"model": str(directory), "device": args.device, "dtype": args.dtype,
                   "gen_length": args.gen_length, "prompts": prompts,
                   "products": args.products}
            sides = {name: child_side(tree, {**job, "side": "engine"}, limit)
                     for name, tree in trees.items()}
            if args.tensor_parallel > 1:
                with Engine.from_pretrained(directory, device=args.device, dtype=dtype,
                                            tensor_parallel=args.tensor_parallel) as split:
                    sides[f"tp{args.tensor_parallel}"] = {"fits": True, **engine_side(
                        split, prompts, args.gen_length)}
            theirs = {"fits": False, "skipped": "--no-transformers"} \
                if args.no_transformers \
                else child_side(str(REPO), {**job, "side": "transformers"}, limit)
            first = next((side["token_ids"] for side in sides.values() if side["fits"]),
                         None)
            report["batches"][str(size)] = {
                "transformers": {k: v for k, v in theirs.items() if k != "token_ids"},
                **{name: compared(side, theirs, first) for name, side in sides.items()}}
    print(json.dumps(report, indent=2))


def compared(side: dict[str, Any], theirs: dict[str, Any], first: list[Any] | None
             ) -> dict[str, Any]:
    """An engine side's figures with its speed-up over transformers (where both ran),
    whether its tokens equal the first engine side's that ran and, at batch 1 (one seed
    on both sides), transformers'."""
    if not side["fits"]:
        return side
    out = {k: v for k, v in side.items() if k != "token_ids"}
    if theirs["fits"]:
        out["speedup"] = round(side["tokens_per_s"] / theirs["tokens_per_s"], 2)
        if len(side["token_ids"]) == 1:
            out["same_tokens_as_transformers"] = side["token_ids"] == theirs["token_ids"]
    out["same_tokens_as_first"] = side["token_ids"] == first
    return out

if __name__ == "__main__":
    main()
