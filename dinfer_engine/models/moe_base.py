"""What LLaDA-MoE and LLaDA2 share: pre-norm decoder layers of QK-norm attention and a
dense or mixture-of-experts MLP, a final norm and an LM head. A family file gives its
attention module, its parameter names and its checkpoint quirks."""

from __future__ import annotations

import re
from typing import ClassVar, cast

import torch
from torch import nn

from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.forward_inputs import ForwardInputs
from dinfer_engine.models.layers import GatedMLP, RMSNorm
from dinfer_engine.models.moe import CheckpointMap, SparseMoE, expert_checkpoint_map
from dinfer_engine.models.moe_config import MoEConfig

LAYER_INDEX = re.compile(r"^model\.layers\.(\d+)\.")


class MoEDecoderLayer(nn.Module):
    def __init__(self, cfg: MoEConfig, index: int, attention: nn.Module,
                 attention_name: str) -> None:
        super().__init__()
        self.attention_name = attention_name
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        setattr(self, attention_name, attention)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = (SparseMoE(cfg) if cfg.moe_layers[index]
                    else GatedMLP(cfg.hidden_size, cfg.intermediate_size))

    def forward(self, x: torch.Tensor, inputs: ForwardInputs, layer: int) -> torch.Tensor:
        attention = getattr(self, self.attention_name)
        x = x + attention(self.input_layernorm(x), inputs, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class MoEModelLM(DiffusionLM):
    embedding_name: ClassVar[str]
    attention_name: ClassVar[str]

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = nn.Module()
        setattr(self.model, self.embedding_name, nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.model.layers = nn.ModuleList(
            MoEDecoderLayer(cfg, i, self.make_attention(cfg), self.attention_name)
            for i in range(cfg.n_layers))
        self.model.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def make_attention(self, cfg: MoEConfig) -> nn.Module:
        raise NotImplementedError

    def checkpoint_name(self, param: str) -> str:
        """The checkpoint's name of a (non-expert) parameter; the same unless overridden."""
        return param

    def embedding(self) -> nn.Embedding:
        return cast(nn.Embedding, getattr(self.model, self.embedding_name))

    def decoder_layers(self) -> nn.ModuleList:
        return cast(nn.ModuleList, self.model.layers)

    def final_norm(self) -> nn.Module:
        return cast(nn.Module, self.model.norm)

    def head_weight(self) -> torch.Tensor:
        return self.embedding().weight if self.config.tie_word_embeddings else self.lm_head.weight

    def rotary_dim(self) -> int:
        return self.config.rotary_dim

    def checkpoint_map(self, available: set[str]) -> CheckpointMap:
        mapping: CheckpointMap = {}
        for name, _ in self.named_parameters():
            if not name.endswith((".w13", ".w2")):
                mapping[self.checkpoint_name(name)] = (name, None)
        for i, moe in enumerate(self.config.moe_layers):
            if moe:
                prefix = f"model.layers.{i}.mlp"
                mapping.update(expert_checkpoint_map(prefix, prefix, self.config, available))
        return mapping

    def ignores(self, name: str) -> bool:
        """Layers past num_hidden_layers (LLaDA2's multi-token-prediction heads)."""
        match = LAYER_INDEX.match(name)
        return match is not None and int(match.group(1)) >= self.config.n_layers
