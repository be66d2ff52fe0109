"""Each Triton kernel against the PyTorch path the engine would otherwise run, at engine
shapes: LLaDA-8B's LM head over 64 x 32 masked positions, and LLaDA-MoE's experts for
2,048 tokens. Prints one JSON object: time (median of CUDA-event timings), achieved
TFLOP/s and GB/s with their share of the device's peak, and peak memory above the inputs.

    python benchmarks/kernels_bench.py            # needs CUDA; on a CPU it says so, exit 0
    python benchmarks/kernels_bench.py --small    # smaller shapes, for a quick look
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

from benchmarks.device_peaks import device_peaks  # noqa: E402
from dinfer_engine.decoding.decoders import sample  # noqa: E402
from dinfer_kernels import backend  # noqa: E402
from dinfer_kernels.lm_head import lm_head_confidence  # noqa: E402
from dinfer_kernels.moe import fused_moe, fused_moe_reference  # noqa: E402

SHAPES = {
    "full": {"n": 64 * 32, "d": 4096, "vocab": 126464, "tokens": 2048, "experts": 64,
             "k": 8, "hidden": 2048, "inter": 1024},
    "small": {"n": 8 * 32, "d": 1024, "vocab": 32000, "tokens": 256, "experts": 16,
              "k": 4, "hidden": 512, "inter": 256},
}


def timed(fn: Callable[[], Any], device: torch.device, repeats: int = 10) -> dict[str, float]:
    """Median milliseconds over `repeats` runs after two warm-ups (autotuning happens
    there), and the peak memory allocated above what was allocated before."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))
    peak = torch.cuda.max_memory_allocated(device) - base
    return {"ms": round(sorted(times)[len(times) // 2], 3), "peak_extra_mb": round(peak / 2**20, 1)}


def rates(result: dict[str, float], flops: float, nbytes: float,
          device: torch.device) -> dict[str, float | None]:
    peak_tflops, peak_gbs = device_peaks(device)
    seconds = result["ms"] / 1e3
    tflops, gbs = flops / seconds / 1e12, nbytes / seconds / 1e9
    return {**result, "tflops": round(tflops, 1), "gb_per_s": round(gbs, 1),
            "share_of_peak_tflops": round(tflops / peak_tflops, 3) if peak_tflops else None,
            "share_of_peak_gb_per_s": round(gbs / peak_gbs, 3) if peak_gbs else None}


def with_backend(choice: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with backend.choosing(choice):
            return fn()
    return run


def bench_lm_head(shape: dict[str, int], device: torch.device) -> dict[str, Any]:
    n, d, vocab = shape["n"], shape["d"], shape["vocab"]
    hidden = torch.randn(n, d, device=device, dtype=torch.bfloat16)
    weight = torch.randn(vocab, d, device=device, dtype=torch.bfloat16) / d ** 0.5
    seeds = torch.arange(n, device=device)
    generator = torch.Generator(device).manual_seed(0)
    banned = vocab - 128  # where LLaDA's mask token (126336 of 126464) sits

    def engine_torch_path(temperature: float) -> Callable[[], Any]:
        # what the engine ran before the kernel: bf16 logits, then decoders.sample (float64)
        return lambda: sample(F.linear(hidden, weight)[None], temperature, [generator], banned)

    def kernel(temperature: float) -> Callable[[], Any]:
        return with_backend("triton", lambda: lm_head_confidence(
            hidden, weight, banned=banned, temperature=temperature, seeds=seeds, step=1))

    flops = 2.0 * n * d * vocab
    nbytes = 2.0 * (vocab * d + n * d)  # the least traffic: read the head and hidden once
    greedy_kernel, greedy_torch = kernel(0.0)(), engine_torch_path(0.0)()
    agree = float((greedy_kernel[0] == greedy_torch[0][0]).float().mean())
    runs = {}
    for name, temperature in (("greedy", 0.0), ("sampling", 1.0)):
        runs[name] = {
            "triton": rates(timed(kernel(temperature), device), flops, nbytes, device),
            "torch": rates(timed(engine_torch_path(temperature), device), flops, nbytes, device),
        }
    return {"shape": {"n": n, "d": d, "vocab": vocab, "dtype": "bfloat16"},
            "greedy_token_agreement_with_torch_bf16_logits": round(agree, 5), **runs}


def bench_moe(shape: dict[str, int], device: torch.device) -> dict[str, Any]:
    tokens, experts, k = shape["tokens"], shape["experts"], shape["k"]
    hidden, inter = shape["hidden"], shape["inter"]
    dtype = torch.bfloat16
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w13 = torch.randn(experts, 2 * inter, hidden, device=device, dtype=dtype) / hidden ** 0.5
    w2 = torch.randn(experts, hidden, inter, device=device, dtype=dtype) / inter ** 0.5
    ids = torch.rand(tokens, experts, device=device).topk(k, dim=-1).indices
    weights = torch.softmax(torch.randn(tokens, k, device=device), dim=-1)
    try:  # the engine's own torch path, once the MoE families are in
        from dinfer_engine.models.moe import grouped_experts as torch_path
        torch_name = "dinfer_engine.models.moe.grouped_experts"
    except ImportError:
        torch_path, torch_name = fused_moe_reference, "dinfer_kernels.moe.fused_moe_reference"
    args = (x, w13, w2, ids, weights)
    kernel = with_backend("triton", lambda: fused_moe(*args))
    error = ((kernel().float() - torch_path(*args).float()).abs().max()
             / torch_path(*args).float().abs().max())
    flops = 2.0 * tokens * k * 3 * hidden * inter
    used = int(torch.unique(ids).numel())
    nbytes = 2.0 * (used * 3 * hidden * inter + 2 * tokens * hidden)
    return {"shape": {"tokens": tokens, "experts": experts, "k": k, "hidden": hidden,
                      "inter": inter, "dtype": "bfloat16"},
            "max_error_vs_torch_relative": round(float(error), 5),
            "triton": rates(timed(kernel, device), flops, nbytes, device),
            "torch": {"path": torch_name, **rates(timed(lambda: torch_path(*args), device),
                                                  flops, nbytes, device)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="smaller shapes")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"gpu": False, "skipped": "no CUDA device: nothing measured"}))
        return
    if not backend.triton_available():
        print(json.dumps({"gpu": True, "skipped": "triton is not installed"}))
        return
    device = torch.device("cuda")
    shape = SHAPES["small" if args.small else "full"]
    peak_tflops, peak_gbs = device_peaks(device)
    print(json.dumps({
        "gpu": True, "device": torch.cuda.get_device_name(device),
        "peak_bf16_tflops": peak_tflops, "peak_gb_per_s": peak_gbs,
        "lm_head_confidence": bench_lm_head(shape, device),
        "fused_moe": bench_moe(shape, device),
    }, indent=1))


if __name__ == "__main__":
    main()
