"""The prompt prefix cache of block diffusion (dinfer_engine/prefix_cache.py) on a random LLaDA2
or (--family diffusion_gemma, dinfer_engine/encoder_prefix.py) DiffusionGemma checkpoint:
`--rows` prompts sharing a `--prefix`-token prefix plus `--distinct` tokens of their own,
decoded by an engine with the cache and by one without, against as many distinct prompts
of the same length; the same answer length throughout.

Prints one JSON object: for each source tree given (`--tree NAME=PATH`, e.g. main and
this branch; default: this checkout), per run the engine's answer tokens per second of
wall time and of the process's CPU time, the prompt tokens the cache gave back
(prefix_tokens_reused) and the process's peak memory (CPU: peak RSS; CUDA: peak
allocated); and the ratio of tokens/s with the cache to without it, for a first generate
call (the cache empty: one row of the batch computes the prefix, the rest reuse it) and
for a second call on the same engine (every row reuses it), and to distinct prompts of
the same length; with several trees, each later tree's first-call tokens/s over the
first tree's, run by run (`over_<first tree>`: e.g. distinct prompts without a cache must
not be slower on a branch than on main).

Every run is a child process of its own (so that peaks are its own; its tree's code first
on sys.path) that loads the engine, makes an untimed call on prompts shorter than a block
(they keep nothing in the cache: a worker's engine runs many calls, and a process's first
forwards cost more whatever the cache holds), then times its calls. Runs go round-robin
over the trees and kinds `--repeats` times, so that the load of a shared machine falls on
all of them alike; figures are the medians over the repeats, ratios the medians' ratios.

    python benchmarks/prefix_cache_bench.py                   # 64 x (512 + 16), CPU
    python benchmarks/prefix_cache_bench.py --prefix 2048 --rows 16
    python benchmarks/prefix_cache_bench.py --tree main=/tmp/base --tree branch=.
    python benchmarks/prefix_cache_bench.py --family diffusion_gemma --tree main=/tmp/base \
        --tree branch=.

Owners (--owners, docs/adr/040-prefix-cache-owners.md): one engine as one worker serves two
owners in turns, `--rounds` times: owner A sends its template's `--rows` lines plus
`--flood` distinct prompts as long as the template, then owner B its template's `--rows`
lines, under a budget of `--budget-mb` (set it to hold a few templates, not a round's
flood). Per owner, after the first round (which fills the cache): its template's reuse
(the prompt tokens the cache gave back over its template lines' whole-block tokens) and
its answer tokens per second; a run without A's flood ("idle") is B's reference. With
the trees main and this branch, A's flood pushes B's template out of main's one
least-recently-used cache but not out of this branch's fair one (main has no owner
scopes: both owners share one).

    python benchmarks/prefix_cache_bench.py --owners --rows 2 --flood 8 --prefix 512 \
        --budget-mb 4 --tree main=/tmp/base --tree branch=.

DiffusionGemma's answers are one canvas of --block-length tokens per --gen-length, in
--steps denoising steps (adaptive stopping off); its cache shares 32-token blocks.

The model is random (answers are meaningless, so the `fixed` decoder gives every run the
same forwards: --steps per answer, about what a trained LLaDA2 takes with its threshold
decoder); its size is set by --hidden / --layers (default: a small one that runs in
minutes on 2 CPU cores). One thread by default: on a couple of cores shared with other
work, a forward on two threads waits at every operator for the slower one, which costs the
cache's many small forwards far more than the uncached run's few large ones.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VOCAB = (5, 40)  # token ids the character tokenizer maps to characters
CALLS = ("first_call", "second_call")


def write_model(directory: Path, args: argparse.Namespace) -> Path:
    sys.path.insert(0, str(REPO))
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
    import torch

    generator = torch.Generator().manual_seed(0)

    def tokens(n: int) -> list[int]:
        return torch.randint(*VOCAB, (n,), generator=generator).tolist()

    common = tokens(prefix)
    return [(common if shared else tokens(prefix)) + tokens(distinct) for _ in range(rows)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One engine (cache on or off) on one prompt set: a warm-up, then two generate calls
    (one without a cache: calls cost the same)."""
    import torch

    from dinfer_engine import Engine, GenerationConfig

    torch.set_num_threads(args.threads)
    budget = args.budget_mb * 2**20 if args.cache == "on" else 0
    engine = Engine.from_pretrained(args.model, device=args.device, prefix_cache_bytes=budget)
    config = GenerationConfig(gen_length=args.gen_length, early_stop=False,
                              max_batch_size=args.rows) \
        if args.family == "diffusion_gemma" else \
        GenerationConfig(gen_length=args.gen_length, block_length=args.block_length,
                         decoder="fixed", steps=args.steps, early_stop=False,
                         max_batch_size=args.rows, max_batch_tokens=1 << 30)
    # no whole block (of either family's cache: DiffusionGemma's are 32): nothing cached
    warm = prompts(2, 0, min(args.block_length, 32) - 1, False)
    engine.generate(warm, config)
    if args.owners:
        return owners(args, engine, config)
    batch = prompts(args.rows, args.prefix, args.distinct, args.prompts == "shared")
    calls = []
    for _ in range(2 if args.cache == "on" else 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        results = engine.generate(batch, config)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        calls.append({"seconds": seconds, "cpu_seconds": cpu_seconds,
                      "tokens": sum(r.completion_tokens for r in results),
                      "nfe": sum(r.nfe for r in results),
                      "prefix_tokens_reused": sum(r.prefix_tokens_reused or 0
                                                  for r in results)})
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return {"first_call": calls[0], "second_call": calls[-1],
            "prefix_cache": engine.prefix_cache_stats(), "peak_memory_mb": peak}


def owners(args: argparse.Namespace, engine: Any, config: Any) -> dict[str, Any]:
    """Two owners' turns on one engine (see the module's docstring); --prompts "flood":
    owner A floods, "idle": it sends its template only."""
    import torch

    generator = torch.Generator().manual_seed(1)

    def tokens(n: int) -> list[int]:
        return torch.randint(*VOCAB, (n,), generator=generator).tolist()

    templates = {"a": tokens(args.prefix), "b": tokens(args.prefix)}
    # requests as objects (ADR 058) carry their scope; before them a `scopes` list did
    parameters = inspect.signature(engine.generate).parameters
    scoped, asked = "scopes" in parameters, "requests" in parameters
    figures = {owner: {"tokens": 0, "seconds": 0.0, "reused": 0, "possible": 0}
               for owner in templates}
    whole = args.prefix // args.block_length * args.block_length
    for round_ in range(args.rounds):
        for owner, template in templates.items():
            batch = [template + tokens(args.distinct) for _ in range(args.rows)]
            if owner == "a" and args.prompts == "flood":
                batch += [tokens(args.prefix + args.distinct) for _ in range(args.flood)]
            extra: dict[str, Any] = {}
            asks: list[Any] = batch
            if scoped or asked:
                from dinfer_engine.cache_scope import CacheScope
                scope = CacheScope(f"owner:{owner}")
            if asked:
                from dinfer_engine.request import GenerationRequest
                asks = [GenerationRequest(prompt, scope=scope) for prompt in batch]
            elif scoped:
                extra["scopes"] = [scope] * len(batch)
            start = time.perf_counter()
            results = engine.generate(asks, config, **extra)
            if round_:  # the first round fills the cache
                mine = figures[owner]
                mine["seconds"] += time.perf_counter() - start
                mine["tokens"] += sum(r.completion_tokens for r in results)
                mine["reused"] += sum(r.prefix_tokens_reused or 0 for r in results[:args.rows])
                mine["possible"] += whole * args.rows
    return {owner: {"template_reuse": round(f["reused"] / max(f["possible"], 1), 3),
                    "tokens_per_s": round(f["tokens"] / f["seconds"], 1)}
            for owner, f in figures.items()} | {"prefix_cache": engine.prefix_cache_stats()}


def owners_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a run's repeats, per owner."""
    return {owner: {name: statistics.median(s[owner][name] for s in samples)
                    for name in ("template_reuse", "tokens_per_s")} for owner in ("a", "b")}


def child(args: argparse.Namespace, tree: str, cache: str, kind: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--cache", cache, "--prompts", kind]
    command += ["--owners"] * args.owners
    for name in ("model", "device", "rows", "prefix", "distinct", "gen_length",
                 "block_length", "steps", "budget_mb", "threads", "family", "flood",
                 "rounds"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                         env=env).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a run's repeats (and each repeat's seconds)."""
    out: dict[str, Any] = {}
    for call in CALLS:
        seconds = [s[call]["seconds"] for s in samples]
        cpu = [s[call]["cpu_seconds"] for s in samples]
        tokens = samples[0][call]["tokens"]
        out[call] = {"seconds": round(statistics.median(seconds), 3),
                     "cpu_seconds": round(statistics.median(cpu), 3),
                     "tokens_per_s": round(tokens / statistics.median(seconds), 1),
                     "tokens_per_cpu_s": round(tokens / statistics.median(cpu), 1),
                     "seconds_each": [round(s, 3) for s in seconds],
                     "nfe": samples[0][call]["nfe"],
                     "prefix_tokens_reused": samples[0][call]["prefix_tokens_reused"]}
    out["prefix_cache"] = samples[0]["prefix_cache"]
    out["peak_memory_mb"] = round(statistics.median(s["peak_memory_mb"] for s in samples), 1)
    return out


def speedups(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    on, off = runs["shared_on"], runs["shared_off"]
    distinct = runs.get("distinct_on", off)  # shared prompts without a cache cost the same
    out = {f"{call}_{rate}": round(on[call][rate] / off[call][rate], 2)
           for call in CALLS for rate in ("tokens_per_s", "tokens_per_cpu_s")}
    out["first_call_over_distinct_prompts"] = round(
        on["first_call"]["tokens_per_s"] / distinct["first_call"]["tokens_per_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH of a source tree to run (repeatable)")
    parser.add_argument("--family", choices=("llada2", "diffusion_gemma"), default="llada2")
    parser.add_argument("--model", type=Path, help="a checkpoint of --family (default: random)")
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
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, round-robin")
    parser.add_argument("--with-distinct", action="store_true",
                        help="also run distinct prompts with the cache (no reuse: its cost)")
    parser.add_argument("--owners", action="store_true",
                        help="two owners, one flooding (see the docstring)")
    parser.add_argument("--flood", type=int, default=8,
                        help="--owners: owner A's distinct prompts per round")
    parser.add_argument("--rounds", type=int, default=3, help="--owners: turns of each")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--prompts", choices=("shared", "distinct", "idle", "flood"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args)))
        return
    trees = [tree.split("=", 1) for tree in args.tree] or [["this", str(REPO)]]
    kinds = [("shared", "on"), ("shared", "off")] + [("distinct", "on")] * args.with_distinct
    if args.owners:
        kinds = [("idle", "on"), ("flood", "on")]
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.model is None:
            args.model = write_model(Path(scratch) / args.family, args)
        for _ in range(args.repeats):
            for name, path in trees:
                for kind, cache in kinds:
                    samples.setdefault((name, f"{kind}_{cache}"), []).append(
                        child(args, path, cache, kind))
    results = owners_results(trees, samples) if args.owners else {}
    for name, _ in trees if not args.owners else []:
        runs = {run: summary(samples[(name, run)]) for kind, cache in kinds
                for run in [f"{kind}_{cache}"]}
        results[name] = {"speedup": speedups(runs), "runs": runs}
        first, base = trees[0][0], results[trees[0][0]]["runs"]
        if name != first:
            results[name][f"over_{first}"] = {
                run: round(runs[run]["first_call"]["tokens_per_s"]
                           / base[run]["first_call"]["tokens_per_s"], 2) for run in runs}
    print(json.dumps({
        "setup": {name: getattr(args, name) for name in (
            "family", "rows", "prefix", "distinct", "gen_length", "block_length", "steps", "hidden",
            "layers", "device", "threads", "repeats", "owners", "flood", "rounds",
            "budget_mb")},
        "trees": results}, indent=1))


def owners_results(trees: list[list[str]], samples: dict[tuple[str, str], list[dict[str, Any]]]
                   ) -> dict[str, Any]:
    """Per tree: each owner's medians idle and flooded, and B's flooded reuse and tokens/s
    over its idle ones (1.0: A's flood costs B nothing)."""
    results = {}
    for name, _ in trees:
        runs = {kind: owners_summary(samples[(name, f"{kind}_on")]) for kind in ("idle", "flood")}
        idle, flood = runs["idle"]["b"], runs["flood"]["b"]
        results[name] = {"runs": runs, "b_flooded_over_idle": {
            metric: round(flood[metric] / idle[metric], 3) if idle[metric] else None
            for metric in ("template_reuse", "tokens_per_s")}}
    return results


if __name__ == "__main__":
    main()
