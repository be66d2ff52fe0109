"""Tiny random checkpoints in the real LLaDA-MoE and LLaDA2 layouts, for tests and
benchmarks: config.json with the public field names (no mask id: it comes from the
tokenizer, as in the public models), safetensors with the public tensor names written
straight from a {name: shape} table (not through the engine's modules), and the
character tokenizer of tests/tiny_model.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from dinfer_training.char_tokenizer import save_char_tokenizer
from tests.tiny_model import CHARS, EOS_ID


def llada_moe_config(vocab_size: int, **overrides: Any) -> dict[str, Any]:
    """config.json as LLaDA-MoE-7B-A1B-Instruct writes it (model_type "llada"), tiny."""
    config = {
        "architectures": ["LLaDAMoEModelLM"],
        "attention_bias": False,
        "dense_intermediate_size": 48,
        "eos_token_id": EOS_ID,
        "expert_intermediate_size": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "max_position_embeddings": 256,
        "model_type": "llada",
        "moe_layer_freq": [1, 0, 1],
        "moe_router_enable_expert_bias": True,
        "moe_router_score_function": "softmax",
        "norm_topk_prob": True,  # ignored by the published router, and so by ours
        "num_attention_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "pad_token_id": EOS_ID,
        "partial_rotary_factor": 1.0,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "shared_expert_intermediate_size": None,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
    }
    config.update(overrides)
    return config


def llada2_config(vocab_size: int, **overrides: Any) -> dict[str, Any]:
    """config.json as LLaDA2.0-mini writes it (model_type "llada2_moe"), tiny."""
    config = {
        "architectures": ["LLaDA2MoeModelLM"],
        "eos_token_id": EOS_ID,
        "first_k_dense_replace": 1,
        "head_dim": 8,
        "hidden_act": "silu",
        "hidden_size": 32,
        "intermediate_size": 48,
        "max_position_embeddings": 256,
        "model_type": "llada2_moe",
        "moe_intermediate_size": 12,
        "moe_router_enable_expert_bias": True,
        "n_group": 4,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 3,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "num_nextn_predict_layers": 1,
        "num_shared_experts": 1,
        "pad_token_id": EOS_ID,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-6,
        "rope_theta": 600000.0,
        "routed_scaling_factor": 2.5,
        "score_function": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 2,
        "use_bias": False,
        "use_qkv_bias": False,
        "vocab_size": vocab_size,
    }
    config.update(overrides)
    return config


def mlp_shapes(prefix: str, hidden: int, inner: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.gate_proj.weight": (inner, hidden),
            f"{prefix}.up_proj.weight": (inner, hidden),
            f"{prefix}.down_proj.weight": (hidden, inner)}


def experts_shapes(prefix: str, c: dict[str, Any], inner: int) -> dict[str, tuple[int, ...]]:
    hidden, experts = c["hidden_size"], c["num_experts"]
    shapes: dict[str, tuple[int, ...]] = {}
    for j in range(experts):
        shapes.update(mlp_shapes(f"{prefix}.experts.{j}", hidden, inner))
    return shapes


def llada_moe_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,)}
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (c["vocab_size"], h)
    for i, moe in enumerate(c["moe_layer_freq"]):
        p = f"model.layers.{i}"
        shapes.update({
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (heads * d, h),
            f"{p}.self_attn.k_proj.weight": (kv * d, h),
            f"{p}.self_attn.v_proj.weight": (kv * d, h),
            f"{p}.self_attn.o_proj.weight": (h, heads * d),
            f"{p}.self_attn.q_norm.weight": (d,), f"{p}.self_attn.k_norm.weight": (d,),
        })
        if not moe:
            shapes.update(mlp_shapes(f"{p}.mlp", h, c["dense_intermediate_size"]))
            continue
        shapes[f"{p}.mlp.gate.weight"] = (c["num_experts"], h)
        if c["moe_router_enable_expert_bias"]:
            shapes[f"{p}.mlp.expert_bias"] = (c["num_experts"],)
        shapes.update(experts_shapes(f"{p}.mlp", c, c["expert_intermediate_size"]))
        if c.get("shared_expert_intermediate_size"):
            shapes.update(mlp_shapes(f"{p}.shared_expert", h,
                                     c["shared_expert_intermediate_size"]))
    return shapes


def llada2_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Includes the multi-token-prediction layer past num_hidden_layers that LLaDA2
    checkpoints carry (the engine ignores it)."""
    h, heads, kv, d = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                       c["head_dim"])
    inner, experts = c["moe_intermediate_size"], c["num_experts"]
    shapes = {"model.word_embeddings.weight": (c["vocab_size"], h), "model.norm.weight": (h,),
              "lm_head.weight": (c["vocab_size"], h)}
    layers = c["num_hidden_layers"] + c.get("num_nextn_predict_layers", 0)
    for i in range(layers):
        p = f"model.layers.{i}"
        shapes.update({
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.attention.query_key_value.weight": ((heads + 2 * kv) * d, h),
            f"{p}.attention.query_layernorm.weight": (d,),
            f"{p}.attention.key_layernorm.weight": (d,),
            f"{p}.attention.dense.weight": (h, heads * d),
        })
        if i < c["first_k_dense_replace"]:
            shapes.update(mlp_shapes(f"{p}.mlp", h, c["intermediate_size"]))
            continue
        shapes[f"{p}.mlp.gate.weight"] = (experts, h)
        shapes[f"{p}.mlp.gate.expert_bias"] = (experts,)
        shapes.update(experts_shapes(f"{p}.mlp", c, inner))
        shapes.update(mlp_shapes(f"{p}.mlp.shared_experts", h, inner * c["num_shared_experts"]))
    return shapes


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Norm weights near 1, embeddings and head with std 1.5 (peaky logits: few
    near-ties), expert biases small, every matrix scaled by 1/sqrt(fan-in)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(shapes.items()):
        noise = torch.randn(shape, generator=generator)
        if name.endswith("norm.weight"):
            tensors[name] = 1 + 0.1 * noise
        elif name.endswith("expert_bias"):
            tensors[name] = 0.1 * noise
        elif "embed" in name or name == "lm_head.weight":
            tensors[name] = 1.5 * noise
        else:
            tensors[name] = noise / shape[-1] ** 0.5
    return tensors


def fuse_experts(tensors: dict[str, torch.Tensor], prefix: str, experts: int) -> None:
    """Rewrite one layer's per-expert tensors in place into the fused mlp.w1/mlp.w2."""
    pop = tensors.pop
    tensors[f"{prefix}.w1"] = torch.stack([
        torch.cat([pop(f"{prefix}.experts.{j}.gate_proj.weight"),
                   pop(f"{prefix}.experts.{j}.up_proj.weight")]) for j in range(experts)])
    tensors[f"{prefix}.w2"] = torch.stack([pop(f"{prefix}.experts.{j}.down_proj.weight")
                                           for j in range(experts)])


def write_checkpoint(directory: Path, config: dict[str, Any],
                     tensors: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file({n: t.contiguous() for n, t in tensors.items()}, directory / "model.safetensors",
              metadata={"format": "pt"})
    return directory


def write_tiny_moe(directory: Path, family: str, seed: int = 0, fused: bool = False,
                   **overrides: Any) -> Path:
    """family "llada_moe" or "llada2"; `fused`: the fused-expert layout (mlp.w1/mlp.w2);
    a `vocab_size` override may exceed the tokenizer's (rows no token uses)."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = len(save_char_tokenizer(CHARS, directory))
    vocab = overrides.pop("vocab_size", vocab)
    if family == "llada_moe":
        config = llada_moe_config(vocab, **overrides)
        shapes = llada_moe_shapes(config)
        moe_layers = [i for i, moe in enumerate(config["moe_layer_freq"]) if moe]
    else:
        config = llada2_config(vocab, **overrides)
        shapes = llada2_shapes(config)
        moe_layers = range(config["first_k_dense_replace"],
                           config["num_hidden_layers"] + config["num_nextn_predict_layers"])
    tensors = random_tensors(shapes, seed)
    if fused:
        for i in moe_layers:
            fuse_experts(tensors, f"model.layers.{i}.mlp", config["num_experts"])
    return write_checkpoint(directory, config, tensors)
