"""DiffusionGemma's config (docs/adr/027-diffusion-gemma.md): the text stack's fields of
config.json's text_config, per layer where Gemma varies them by layer type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dinfer_engine.models.config import CheckpointError

DEFAULT_CANVAS = 256  # transformers' DiffusionGemmaConfig.canvas_length

SLIDING = "sliding_attention"


@dataclass(frozen=True)
class DiffusionGemmaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_experts: int
    top_k_experts: int
    num_heads: int
    layer_types: tuple[str, ...]
    head_dims: tuple[int, ...]  # per layer
    kv_heads: tuple[int, ...]  # per layer
    rope: dict[str, dict[str, Any]]  # per layer type
    sliding_window: int
    rms_norm_eps: float
    canvas_length: int
    eos_token_id: int
    pad_token_id: int
    max_sequence_length: int
    final_logit_softcapping: float = 30.0
    mask_token_id: None = None  # no masks: the canvas starts as uniform noise

    @property
    def embedding_size(self) -> int:
        return self.vocab_size

    @property
    def n_layers(self) -> int:
        return len(self.layer_types)


def read_config(raw: dict[str, Any], special_ids: dict[str, int]) -> DiffusionGemmaConfig:
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise CheckpointError("config.json: a diffusion_gemma config needs its text_config")
    if not text.get("num_experts"):
        raise CheckpointError("config.json: text_config.num_experts must be set (the "
                              "DiffusionGemma block always has its MoE branch)")
    types = tuple(text["layer_types"])
    per_layer = {int(k): v for k, v in (text.get("per_layer_config") or {}).items()}
    head_dims = tuple(per_layer.get(i, {}).get("head_dim", text["head_dim"])
                      for i in range(len(types)))
    kv_heads = tuple(per_layer.get(i, {}).get("num_key_value_heads",
                                              text["num_key_value_heads"])
                     for i in range(len(types)))
    eos: Any = text.get("eos_token_id", special_ids.get("eos"))
    return DiffusionGemmaConfig(
        vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
        intermediate_size=text["intermediate_size"],
        moe_intermediate_size=text["moe_intermediate_size"],
        num_experts=text["num_experts"], top_k_experts=text["top_k_experts"],
        num_heads=text["num_attention_heads"], layer_types=types, head_dims=head_dims,
        kv_heads=kv_heads, rope=text["rope_parameters"],
        sliding_window=text["sliding_window"], rms_norm_eps=text["rms_norm_eps"],
        canvas_length=raw.get("canvas_length", DEFAULT_CANVAS),
        eos_token_id=int(eos[0] if isinstance(eos, list) else eos),
        pad_token_id=text.get("pad_token_id", 0),
        max_sequence_length=text["max_position_embeddings"])
