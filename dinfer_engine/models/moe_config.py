"""Configuration of the mixture-of-experts families, read from their config.json as the
public checkpoints write it: LLaDA-MoE (Hugging Face OLMoE-style field names) and LLaDA2
(`model_type` "llada2_moe", Ling/Bailing field names). Both share one dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dinfer_engine.models.config import CheckpointError

SOFTMAX, SIGMOID_GROUPED = "softmax", "sigmoid_grouped"


@dataclass(frozen=True)
class MoEConfig:
    """The network of a LLaDA-MoE or LLaDA2 checkpoint. `moe_layers[i]`: layer i routes
    over experts (else a dense MLP of `intermediate_size`). `shared_intermediate_size` 0
    means no shared expert. `router`: SOFTMAX (LLaDA-MoE) or SIGMOID_GROUPED (LLaDA2)."""

    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rotary_dim: int
    intermediate_size: int
    moe_layers: tuple[bool, ...]
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    shared_intermediate_size: int
    router: str
    expert_bias: bool
    n_group: int
    topk_group: int
    routed_scaling_factor: float
    qk_norm: bool
    qkv_bias: bool
    out_bias: bool
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    mask_token_id: int
    eos_token_id: int
    pad_token_id: int
    max_sequence_length: int

    @property
    def embedding_size(self) -> int:
        return self.vocab_size

    @classmethod
    def for_llada_moe(cls, raw: dict[str, Any], special_ids: dict[str, int]) -> MoEConfig:
        require(raw, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                "num_experts", "num_experts_per_tok")
        n_layers = int(raw["num_hidden_layers"])
        freq = raw.get("moe_layer_freq", 1)
        moe_layers = (tuple(bool(f) for f in freq) if isinstance(freq, list)
                      else tuple(bool(freq) and i % int(freq) == 0 for i in range(n_layers)))
        if len(moe_layers) != n_layers:
            raise CheckpointError(f"config.json: moe_layer_freq has {len(moe_layers)} entries "
                                  f"for num_hidden_layers={n_layers}")
        expert = raw.get("expert_intermediate_size") or raw.get("moe_intermediate_size")
        dense = raw.get("dense_intermediate_size") or raw.get("intermediate_size") or 0
        score = raw.get("moe_router_score_function", SOFTMAX)
        if score != SOFTMAX:
            raise CheckpointError(f"config.json: moe_router_score_function {score!r} is not "
                                  "supported for LLaDA-MoE (only 'softmax')")
        if raw.get("clip_qkv") is not None:
            raise CheckpointError("config.json: clip_qkv is not supported")
        return cls(
            **attention_fields(raw, rotary_factor=1.0, eps=1e-5, theta=10000.0),
            **token_fields(raw, special_ids),
            n_layers=n_layers,
            intermediate_size=int(dense),
            moe_layers=moe_layers,
            num_experts=int(raw["num_experts"]),
            top_k=int(raw["num_experts_per_tok"]),
            expert_intermediate_size=int(require_value(raw, expert, "expert_intermediate_size")),
            shared_intermediate_size=int(raw.get("shared_expert_intermediate_size") or 0),
            router=SOFTMAX,
            expert_bias=bool(raw.get("moe_router_enable_expert_bias", False)),
            n_group=1,
            topk_group=1,
            routed_scaling_factor=1.0,
            qk_norm=bool(raw.get("qk_layernorm", True)),
            qkv_bias=bool(raw.get("attention_bias", False)),
            out_bias=bool(raw.get("attention_bias", False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )

    @classmethod
    def for_llada2(cls, raw: dict[str, Any], special_ids: dict[str, int]) -> MoEConfig:
        require(raw, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                "num_experts", "num_experts_per_tok", "moe_intermediate_size")
        n_layers = int(raw["num_hidden_layers"])
        first_dense = int(raw.get("first_k_dense_replace") or 0)
        experts = int(raw["num_experts"])
        n_group = int(raw.get("n_group") or 8)
        topk_group = int(raw.get("topk_group") or 4)
        if experts % n_group or not 1 <= topk_group <= n_group:
            raise CheckpointError(f"config.json: num_experts={experts} must divide into "
                                  f"n_group={n_group} groups, and 1 <= topk_group <= n_group")
        shared = int(raw.get("num_shared_experts") or 0)
        # defaults: the published LLaDA2MoeConfig's
        return cls(
            **attention_fields(raw, rotary_factor=0.5, eps=1e-5, theta=10000.0),
            **token_fields(raw, special_ids),
            n_layers=n_layers,
            intermediate_size=int(raw.get("intermediate_size") or 0),
            moe_layers=tuple(i >= first_dense for i in range(n_layers)),
            num_experts=experts,
            top_k=int(raw["num_experts_per_tok"]),
            expert_intermediate_size=int(raw["moe_intermediate_size"]),
            shared_intermediate_size=int(raw["moe_intermediate_size"]) * shared,
            router=SIGMOID_GROUPED,
            expert_bias=bool(raw.get("moe_router_enable_expert_bias", True)),
            n_group=n_group,
            topk_group=topk_group,
            routed_scaling_factor=float(raw.get("routed_scaling_factor", 2.5)),
            qk_norm=bool(raw.get("use_qk_norm", True)),
            qkv_bias=bool(raw.get("use_qkv_bias", False)),
            out_bias=bool(raw.get("use_bias", True)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )


def require(raw: dict[str, Any], *names: str) -> None:
    missing = [name for name in names if raw.get(name) is None]
    if missing:
        raise CheckpointError(f"config.json lacks required field(s): {', '.join(missing)}")


def require_value(raw: dict[str, Any], value: Any, name: str) -> Any:
    if value is None:
        raise CheckpointError(f"config.json lacks required field(s): {name}")
    return value


def attention_fields(raw: dict[str, Any], rotary_factor: float, eps: float,
                     theta: float) -> dict[str, Any]:
    """Attention shape and RoPE; the keyword arguments are the family's defaults."""
    hidden, heads = int(raw["hidden_size"]), int(raw["num_attention_heads"])
    kv_heads = int(raw.get("num_key_value_heads") or heads)
    head_dim = int(raw.get("head_dim") or hidden // heads)
    if heads % kv_heads:
        raise CheckpointError(f"config.json: num_attention_heads={heads} must be a multiple "
                              f"of num_key_value_heads={kv_heads}")
    rotary_dim = int(head_dim * float(raw.get("partial_rotary_factor") or rotary_factor))
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise CheckpointError(f"config.json: partial_rotary_factor gives {rotary_dim} rotary "
                              f"dims of head_dim={head_dim}; need an even number in (0, "
                              f"{head_dim}]")
    return {
        "hidden_size": hidden, "n_heads": heads, "n_kv_heads": kv_heads, "head_dim": head_dim,
        "rotary_dim": rotary_dim,
        "rope_theta": float(raw.get("rope_theta") or theta),
        "rms_norm_eps": float(raw.get("rms_norm_eps") or eps),
        "vocab_size": int(raw["vocab_size"]),
    }


def token_fields(raw: dict[str, Any], special_ids: dict[str, int]) -> dict[str, int]:
    """Mask and EOS ids: config.json's when it has them, else the tokenizer's (the public
    LLaDA-MoE and LLaDA2 configs carry no mask id)."""
    mask = raw.get("mask_token_id", special_ids.get("mask"))
    eos = raw.get("eos_token_id", special_ids.get("eos"))
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if mask is None or eos is None:
        missing = [n for n, v in (("mask", mask), ("eos", eos)) if v is None]
        raise CheckpointError(f"no {' or '.join(missing)} token id: config.json has no "
                              f"{'/'.join(m + '_token_id' for m in missing)} and the tokenizer "
                              "defines no such token")
    pad = raw.get("pad_token_id")
    return {
        "mask_token_id": int(mask),
        "eos_token_id": int(eos),
        "pad_token_id": int(eos if pad is None else pad),
        "max_sequence_length": int(raw.get("max_position_embeddings")
                                   or raw.get("max_sequence_length") or 4096),
    }
