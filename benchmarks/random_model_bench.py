"""Engine throughput on random weights in a real model's shape, built in device memory
(no checkpoint on disk): LLaDA-8B dense and LLaDA-MoE-7B-A1B, per batch size and kernel
path (the engine's kernels: torch / triton). Prints one JSON object
with tokens/s, forwards/s, tokens per forward, model FLOP utilisation (MFU: the forwards'
matmul FLOPs over the device's bf16 peak) and peak memory.

Random weights give near-uniform predictions, so the threshold decoder mostly commits
one token per forward: the figures are a per-forward throughput, not a quality claim.

    python benchmarks/random_model_bench.py --device cuda                 # LLaDA-8B shape
    python benchmarks/random_model_bench.py --device cpu --shapes tiny    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from torch import nn
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.device_peaks import device_peaks  # noqa: E402
from benchmarks.engine_bench import measure  # noqa: E402
from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.models.families import family_of  # noqa: E402
from dinfer_kernels.backend import triton_available  # noqa: E402

LLADA_8B = {"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32,
            "mlp_hidden_size": 12288, "vocab_size": 126464, "embedding_size": 126464,
            "mask_token_id": 126336, "eos_token_id": 126081, "pad_token_id": 126081,
            "max_sequence_length": 4096, "rope_theta": 500000.0, "model_type": "llada"}
# LLaDA-MoE-7B-A1B's sizes (hidden 2048, 16 layers, 64 experts, top 8, expert width 1024,
# Ling's 157,184-token vocabulary); the special ids are arbitrary: the weights are random
LLADA_MOE = {"model_type": "llada", "hidden_size": 2048, "num_hidden_layers": 16,
             "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
             "num_experts_per_tok": 8, "expert_intermediate_size": 1024,
             "dense_intermediate_size": 8192, "moe_layer_freq": [1] * 16,
             "moe_router_enable_expert_bias": False, "partial_rotary_factor": 1.0,
             "vocab_size": 157184, "rope_theta": 50000.0, "rms_norm_eps": 1e-5,
             "max_position_embeddings": 8192, "tie_word_embeddings": False,
             "mask_token_id": 156895, "eos_token_id": 156892, "pad_token_id": 156892}
SHAPES = {
    "llada-8b": LLADA_8B,
    "llada-moe": LLADA_MOE,
    "tiny": {**LLADA_8B, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
             "mlp_hidden_size": 128, "vocab_size": 1000, "embedding_size": 1000,
             "mask_token_id": 999, "eos_token_id": 998, "pad_token_id": 998},
    "tiny-moe": {**LLADA_MOE, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": 8,
                 "num_experts_per_tok": 2, "expert_intermediate_size": 32,
                 "moe_layer_freq": [1, 1], "vocab_size": 1000, "mask_token_id": 999,
                 "eos_token_id": 998, "pad_token_id": 998},
}


def random_model(shape: dict[str, Any], device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Random weights straight in device memory, in the family's own module layout."""
    family = family_of(shape)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = family(family.read_config(shape, {}))
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # every parameter explicitly: some families allocate them empty
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.fill_(1.0 if "norm" in name else 0.0)
            else:
                param.normal_(0.0, param.shape[-1] ** -0.5)
    return model.eval()


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A tokenizer with one word per id ("t0" .. ), enough to decode random answers."""
    model = WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0")
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def active_layer_parameters(model: nn.Module) -> float:
    """Parameters of the decoder layers that one token multiplies with: all of them, but
    of the routed experts (fused w13 / w2) only top_k of num_experts."""
    cfg = model.config
    share = cfg.top_k / cfg.num_experts if hasattr(cfg, "num_experts") else 1.0
    total = 0.0
    for name, param in model.named_parameters():
        if any(part in name for part in (".blocks.", ".layers.")):
            total += param.numel() * (share if name.endswith((".w13", ".w2")) else 1.0)
    return total


def count_flops(model: nn.Module, block_length: int) -> tuple[list[float], Any]:
    """A forward hook summing each forward's matmul FLOPs: 2 x active layer parameters per
    token, attention scores and values (4 x heads x head_dim x queries x keys per layer),
    and the head over the block positions. Returns the running total [flops] and the
    hook handle."""
    cfg = model.config
    layers = active_layer_parameters(model)
    attention_width = cfg.n_heads * cfg.head_dim
    vocab, d = model.head_weight().shape
    total = [0.0]

    def hook(_module: nn.Module, args: tuple, kwargs: dict, _output: Any) -> None:
        ids = args[0] if args else kwargs["input_ids"]
        rows, queries = ids.shape
        mask = kwargs.get("attention_mask")
        keys = mask.shape[-1] if mask is not None else queries
        total[0] += (2.0 * layers * rows * queries
                     + 4.0 * cfg.n_layers * attention_width * rows * queries * keys
                     + 2.0 * d * vocab * rows * block_length)

    return total, model.register_forward_hook(hook, with_kwargs=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="llada-8b", help=f"from {', '.join(SHAPES)}")
    parser.add_argument("--batch-sizes", default="1,32,128")
    parser.add_argument("--kernels", default="torch,triton", help="the engine's kernels values")
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--threshold", type=float, default=0.9)
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak_tflops, _ = device_peaks(device)
    paths = [k for k in args.kernels.split(",") if k != "triton" or triton_available()]
    generator = torch.Generator().manual_seed(0)
    report: dict[str, Any] = {"device": str(device), "dtype": str(dtype),
                              "peak_bf16_tflops": peak_tflops, "shapes": {}}
    for name in args.shapes.split(","):
        if name not in SHAPES:
            report["shapes"][name] = {"skipped": f"no {name!r} shape in this engine"}
            continue
        shape = SHAPES[name]
        engine = Engine(random_model(shape, device, dtype), word_tokenizer(shape["vocab_size"]))
        ordinary = min(shape["mask_token_id"], shape["eos_token_id"])  # ids below are words
        largest = max(int(b) for b in args.batch_sizes.split(","))
        prompts = [torch.randint(0, ordinary, (args.prompt_length,), generator=generator).tolist()
                   for _ in range(largest)]
        runs = []
        for kernels in paths:
            engine.kernels = kernels
            for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                config = GenerationConfig(
                    gen_length=args.gen_length, block_length=args.block_length,
                    decoder="threshold", threshold=args.threshold, cache="dual",
                    temperature=0.0, early_stop=False, max_batch_size=batch_size,
                    max_batch_tokens=2**31 - 1)
                engine.generate(prompts[:1], config)  # warm-up (kernel compilation)
                flops, handle = count_flops(engine.model, args.block_length)
                try:
                    figures = measure(engine, config, prompts[:batch_size])
                finally:
                    handle.remove()
                achieved = flops[0] / figures["seconds"] / 1e12
                runs.append({"kernels": kernels, "batch_size": batch_size, **figures,
                             "tflops": round(achieved, 2),
                             "mfu": round(achieved / peak_tflops, 4) if peak_tflops else None})
        report["shapes"][name] = {"parameters": sum(p.numel() for p in engine.model.parameters()),
                                  "runs": runs}
        del engine
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report["settings"] = {k: getattr(args, k) for k in
                          ("prompt_length", "gen_length", "block_length", "threshold")}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
