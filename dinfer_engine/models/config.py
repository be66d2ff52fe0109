"""Model configuration read from a checkpoint's config.json (LLaDA field names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded: missing, partial or inconsistent."""


@dataclass(frozen=True)
class LLaDAConfig:
    """The subset of LLaDA's config.json that defines the network."""

    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden_size: int
    vocab_size: int
    embedding_size: int
    rope_theta: float
    rms_norm_eps: float
    weight_tying: bool
    include_bias: bool
    mask_token_id: int
    eos_token_id: int
    pad_token_id: int
    max_sequence_length: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LLaDAConfig:
        required = ["d_model", "n_layers", "n_heads", "vocab_size", "mask_token_id",
                    "eos_token_id"]
        missing = [name for name in required if raw.get(name) is None]
        if missing:
            raise CheckpointError(f"config.json lacks required field(s): {', '.join(missing)}")
        d_model, n_heads = int(raw["d_model"]), int(raw["n_heads"])
        n_kv_heads = int(raw.get("n_kv_heads") or n_heads)
        if d_model % n_heads or n_heads % n_kv_heads:
            raise CheckpointError(
                f"config.json: d_model={d_model} must divide by n_heads={n_heads}, "
                f"and n_heads by n_kv_heads={n_kv_heads}"
            )
        if raw.get("block_type", "llama") != "llama":
            raise CheckpointError(
                f"config.json: block_type {raw['block_type']!r} is not supported (only 'llama')"
            )
        mlp_hidden = raw.get("mlp_hidden_size") or int(raw.get("mlp_ratio", 4)) * d_model
        vocab_size = int(raw["vocab_size"])
        return cls(
            d_model=d_model,
            n_layers=int(raw["n_layers"]),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            mlp_hidden_size=int(mlp_hidden),
            vocab_size=vocab_size,
            embedding_size=int(raw.get("embedding_size") or vocab_size),
            rope_theta=float(raw.get("rope_theta", 10000.0)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
            weight_tying=bool(raw.get("weight_tying", False)),
            include_bias=bool(raw.get("include_bias", False)),
            mask_token_id=int(raw["mask_token_id"]),
            eos_token_id=int(raw["eos_token_id"]),
            pad_token_id=int(raw.get("pad_token_id", raw["eos_token_id"])),
            max_sequence_length=int(raw.get("max_sequence_length", 4096)),
        )
