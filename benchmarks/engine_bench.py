"""Engine throughput per batch size and decoder/cache combination.

Prints one JSON object: for each decoder x cache and batch size, output tokens/s, tokens
per forward (TPF: answer tokens per forward of a sequence), forwards/s (model calls), the
seconds spent in full forwards and in span forwards (dinfer_engine/forwards/forward.py) and
peak memory (CUDA: peak allocated for that run; CPU: the process's peak RSS so far).

    python benchmarks/engine_bench.py               # dinfer_models/demo, or a tiny random model
    python benchmarks/engine_bench.py --model /path/to/LLaDA-8B-Instruct --device cuda
    python benchmarks/engine_bench.py --model DIR --decoders threshold --caches dual
    python benchmarks/engine_bench.py --model DIR --tensor-parallel 2   # 2 ranks (processes)

With --tensor-parallel N the model is split over N ranks (dinfer_engine/parallel/); the JSON
adds each rank's parameter bytes and peak memory (CUDA: peak allocated; CPU: peak RSS of
the rank's process), and "peak_memory_mb" is rank 0's.

A block-diffusion model (LLaDA2) always runs its own cache: its runs say cache "block"
(give it --caches none).
--prompt-tokens N feeds prompts of exactly N tokens (the example prompts' text, repeated).
--baseline DIR also measures another checkout (e.g. the previous commit, from `git
worktree add /tmp/base HEAD~1`): every run goes to a child process importing DIR's
engine and one importing this one, one after the other (--rounds R times, alternating
which goes first), and the JSON gives both with this checkout's speed-up:

    python benchmarks/engine_bench.py --model DIR --baseline /tmp/base --prompt-tokens 1024
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

REPO = Path(__file__).resolve().parents[1]
if TYPE_CHECKING:
    from dinfer_engine import Engine, GenerationConfig

DECODERS = ("fixed", "threshold")
CACHES = ("none", "prefix", "dual")
EXAMPLE_PROMPTS = REPO / "examples" / "prompts.jsonl"
FALLBACK_PROMPT = "add 12 and 30 then tell me what the sum is and why"


def load_prompts(path: Path | None) -> list[str]:
    """The "prompt" of every line of a JSONL file (default: examples/prompts.jsonl), or
    mixed-length prompts of 3 to 12 words when there is no file."""
    path = path or (EXAMPLE_PROMPTS if EXAMPLE_PROMPTS.is_file() else None)
    if path is None:
        words = FALLBACK_PROMPT.split()
        return [" ".join(words[: 3 + i % 10]) for i in range(10)]
    lines = path.read_text().splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()]


def take(pool: list[str], count: int) -> list[str]:
    return [pool[i % len(pool)] for i in range(count)]


def token_prompts(engine: Engine, pool: list[str], count: int, length: int) -> list[list[int]]:
    """`count` different prompts of exactly `length` tokens: windows of the pool's text."""
    ids: list[int] = engine.tokenizer(" ".join(pool))["input_ids"]
    ids = ids * (-(-(length + count) // len(ids)))
    return [ids[i:i + length] for i in range(count)]


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def measure(engine: Engine, config: GenerationConfig, prompts: list[str]) -> dict[str, float]:
    """One generation's figures; its forwards' time is split into full forwards (whole
    rows: block starts, no cache) and span forwards (a window read against the cache)."""
    forwards = 0
    seconds_by_kind = {"full": 0.0, "span": 0.0}
    started: list[tuple[str, float]] = []

    def synchronize() -> None:
        if engine.device.type == "cuda":
            torch.cuda.synchronize(engine.device)

    def before(_: Any, args: Any, kwargs: dict[str, Any]) -> None:
        span = kwargs.get("cache") is not None and not kwargs.get("store_cache")
        synchronize()
        started.append(("span" if span else "full", time.perf_counter()))

    def after(*_: Any) -> None:
        nonlocal forwards
        synchronize()
        kind, at = started.pop()
        seconds_by_kind[kind] += time.perf_counter() - at
        forwards += 1

    synchronize()
    if engine.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.device)
    handles = [engine.model.register_forward_pre_hook(before, with_kwargs=True),
               engine.model.register_forward_hook(after)]
    start = time.perf_counter()
    try:
        outs = engine.generate(prompts, config)
    finally:
        for handle in handles:
            handle.remove()
    synchronize()
    seconds = time.perf_counter() - start
    tokens = sum(o.completion_tokens for o in outs)
    return {
        "output_tokens_per_s": round(tokens / seconds, 1),
        "tpf": round(tokens / sum(o.nfe for o in outs), 3),
        "forwards_per_s": round(forwards / seconds, 1),
        "peak_memory_mb": round(peak_memory_mb(engine.device), 1),
        "seconds": round(seconds, 3),
        "full_forward_seconds": round(seconds_by_kind["full"], 3),
        "span_forward_seconds": round(seconds_by_kind["span"], 3),
    }


def default_model(scratch: Path) -> Path:
    demo = REPO / "dinfer_models" / "demo"
    if (demo / "config.json").is_file():
        return demo
    from tests.tiny_model import write_tiny_checkpoint

    return write_tiny_checkpoint(scratch / "tiny")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint directory")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-sizes", default="1,8,32,64")
    parser.add_argument("--gen-length", type=int, help="default: the model's, else 128")
    parser.add_argument("--block-length", type=int, help="default: the model's, else 32")
    parser.add_argument("--steps", type=int, help="default: the model's, else gen_length")
    parser.add_argument("--threshold", type=float, help="default: the model's, else 0.9")
    parser.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                        help="--no-early-stop: every answer runs to gen_length (random weights "
                             "stop at random places)")
    parser.add_argument("--warmup-steps", type=int, help="the vicinity cache's full forwards")
    parser.add_argument("--prompts", type=Path, help="JSONL with a \"prompt\" per line")
    parser.add_argument("--prompt-tokens", type=int, help="prompts of exactly this many tokens")
    parser.add_argument("--decoders", default=",".join(DECODERS))
    parser.add_argument("--caches", default=",".join(CACHES),
                        help="ignored for block-diffusion models (LLaDA2)")
    parser.add_argument("--tensor-parallel", type=int, default=1,
                        help="ranks to split the model over (one process each)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on a shared CPU, intra-op threads "
                             "slow small models down)")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure alongside")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline: measure each run this many times")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline is not None:
        compare(args)
        return
    sys.path.insert(0, str(args.tree or REPO))  # the engine measured; tests.tiny_model
    from dinfer_engine import Engine, GenerationConfig

    torch.set_num_threads(args.threads)
    pool = load_prompts(args.prompts)
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or default_model(Path(scratch))
        engine = Engine.from_pretrained(model, device=args.device,
                                        tensor_parallel=args.tensor_parallel)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    resolved = engine.resolve_config(GenerationConfig(
        gen_length=args.gen_length, block_length=args.block_length, steps=args.steps,
        threshold=args.threshold, early_stop=args.early_stop, temperature=0.0))
    base = {name: getattr(resolved, name) for name in
            ("gen_length", "block_length", "steps", "threshold", "early_stop", "temperature")}
    if args.warmup_steps is not None:
        base["warmup_steps"] = args.warmup_steps
    block = resolved.block_length  # warm-up: one forward of one block
    engine.generate(take(pool, 2), GenerationConfig(**{**base, "gen_length": block, "steps": 1}))
    block_causal = engine.model.family.block_causal
    caches = ["none"] if block_causal else args.caches.split(",")
    runs = []
    for decoder, cache, batch_size in itertools.product(args.decoders.split(","), caches,
                                                        batch_sizes):
        config = GenerationConfig(decoder=decoder, cache=cache, max_batch_size=batch_size,
                                  max_batch_tokens=2**31 - 1, **base)
        prompts: list[Any] = (take(pool, batch_size) if args.prompt_tokens is None
                              else token_prompts(engine, pool, batch_size, args.prompt_tokens))
        runs.append({"decoder": decoder, "cache": "block" if block_causal else cache,
                     "batch_size": batch_size, **measure(engine, config, prompts)})
    print(json.dumps({
        "model": str(model),
        "family": type(engine.model).__name__,
        "parameters": sum(p.numel() for p in engine.model.parameters()),  # rank 0's
        "tensor_parallel": engine.tensor_parallel,
        "rank_parameter_bytes": engine.parameter_bytes(),
        "rank_peak_memory_mb": [round(m, 1) for m in engine.peak_memory_mb()],
        "device": str(engine.device),
        "dtype": str(next(engine.model.parameters()).dtype),
        "threads": torch.get_num_threads(),
        "prompt_tokens": args.prompt_tokens,
        "settings": base,
        "runs": runs,
    }, indent=1))
    engine.close()


def compare(args: argparse.Namespace) -> None:
    """Every decoder x cache x batch size run on the baseline checkout and on this one,
    each in its own child process, `--rounds` times (the first of the two alternating);
    one JSON object with each round's figures and the median speed-up."""
    passed = list(sys.argv[1:])
    for flag in ("--baseline", "--rounds"):
        if flag in passed:
            at = passed.index(flag)
            del passed[at:at + 2]
        passed = [a for a in passed if not a.startswith(flag + "=")]
    runs, report = [], {}
    for decoder, cache, batch_size in itertools.product(
            args.decoders.split(","), args.caches.split(","), args.batch_sizes.split(",")):
        rounds = []
        for round_ in range(args.rounds):
            trees = [("baseline", args.baseline), ("this", REPO)]
            pair = {}
            for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
                command = [sys.executable, __file__, *passed, "--tree", str(tree),
                           "--decoders", decoder, "--caches", cache, "--batch-sizes", batch_size]
                env = {**os.environ, "PYTHONPATH": str(tree)}
                out = subprocess.run(command, capture_output=True, text=True, env=env,
                                     check=True)
                report = json.loads(out.stdout)
                pair[name] = report["runs"][0]
            pair["speed_up"] = round(pair["this"]["output_tokens_per_s"]
                                     / max(pair["baseline"]["output_tokens_per_s"], 1e-9), 3)
            for kind in ("full", "span"):  # the same forwards' time, baseline / this
                before, now = (pair[k].get(f"{kind}_forward_seconds", 0.0)
                               for k in ("baseline", "this"))
                if before > 0 and now > 0:
                    pair[f"{kind}_forward_speed_up"] = round(before / now, 3)
            rounds.append(pair)
        runs.append({"decoder": decoder, "cache": rounds[0]["this"]["cache"],
                     "batch_size": int(batch_size), "rounds": rounds,
                     "median_speed_up": statistics.median(r["speed_up"] for r in rounds)})
    report.pop("runs", None)
    print(json.dumps({**report, "baseline": str(args.baseline), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
