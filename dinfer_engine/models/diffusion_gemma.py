"""DiffusionGemma (docs/adr/027-diffusion-gemma.md): one Gemma text stack run as a causal
encoder that writes a per-row KV cache of the prompt and committed canvases, and as a
bidirectional decoder over a canvas that reads it. Parameter names are the checkpoint's
(transformers' `save_pretrained` layout), so the default checkpoint map applies."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.models import fixed_grid
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.diffusion_gemma_config import SLIDING, DiffusionGemmaConfig, read_config
from dinfer_engine.models.layers import GatedMLP
from dinfer_kernels import fused_moe, use_triton

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, H_kv, T, D]


class GemmaNorm(nn.Module):
    """transformers' DiffusionGemmaRMSNorm: x * pow(mean(x^2) + eps, -0.5) [* weight], fp32."""

    def __init__(self, dim: int, eps: float, scaled: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if scaled else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            h = h * self.weight.float()
        return h.type_as(x)


def inverse_frequencies(rope: dict[str, Any], head_dim: int) -> torch.Tensor:
    """[head_dim / 2]: default RoPE over the rotated share of the head, or proportional
    RoPE (the first share of frequencies over the whole head, the rest 0)."""
    theta, share = rope["rope_theta"], rope.get("partial_rotary_factor", 1.0)
    if rope.get("rope_type", "default") == "proportional":
        angles = int(share * head_dim // 2)
        rotated = 1.0 / theta ** (torch.arange(0, 2 * angles, 2).float() / head_dim)
        return torch.cat([rotated, torch.zeros(head_dim // 2 - angles)])
    dim = int(head_dim * share)
    return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig, layer: int) -> None:
        super().__init__()
        d, kv, h = cfg.head_dims[layer], cfg.kv_heads[layer], cfg.hidden_size
        # this module's heads: the model's, or a tensor-parallel rank's share
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.num_heads, kv, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, kv * d, bias=False)
        # full layers have no v_proj: values are the keys' projection
        self.v_proj = nn.Linear(h, kv * d, bias=False) if cfg.layer_types[layer] == SLIDING \
            else None
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.q_norm = GemmaNorm(d, cfg.rms_norm_eps)
        self.k_norm = GemmaNorm(d, cfg.rms_norm_eps)
        self.v_norm = GemmaNorm(d, cfg.rms_norm_eps, scaled=False)
        # how the projections split across tensor-parallel ranks (dinfer_engine/parallel/layers.py)
        self.tensor_parallel = {"q_proj": "heads", "k_proj": "kv_heads", "o_proj": "heads_in",
                                **({"v_proj": "kv_heads"} if self.v_proj is not None else {})}

    def project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, H, S, D], k and v [B, H_kv, S, D]; rope cos/sin [B, S, D]."""
        shape = (*x.shape[:2], -1, self.head_dim)
        cos, sin = rope[0][:, :, None], rope[1][:, :, None]
        q = rotate(self.q_norm(self.q_proj(x).view(shape)), cos, sin)
        raw = self.k_proj(x).view(shape)
        v = raw if self.v_proj is None else self.v_proj(x).view(shape)
        k = rotate(self.k_norm(raw), cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2), self.v_norm(v).transpose(1, 2)

    def output(self, heads: torch.Tensor) -> torch.Tensor:
        """o_proj of the heads' outputs [B, H, S, D]."""
        return self.o_proj(heads.transpose(1, 2).reshape(*heads.shape[:1], heads.shape[2], -1))


class Router(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.top_k, self.eps = cfg.top_k_experts, cfg.rms_norm_eps
        self.norm = GemmaNorm(cfg.hidden_size, cfg.rms_norm_eps, scaled=False)
        self.proj = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(cfg.hidden_size))
        self.per_expert_scale = nn.Parameter(torch.ones(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x) * self.scale * x.shape[-1] ** -0.5
        probs = F.softmax(self.proj(h), dim=-1, dtype=torch.float32)
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        return weights * self.per_expert_scale[index], index


class Experts(nn.Module):
    # parameters holding one expert per row of dim 0: tensor-parallel ranks each hold an
    # even share of the experts (dinfer_engine/parallel/layers.py sets `first` and `reduce`)
    expert_parallel: ClassVar[tuple[str, ...]] = ("gate_up_proj", "down_proj")

    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))
        self.first = 0  # the model's expert number of this module's expert 0
        # sums the partial outputs of the ranks holding the other experts (None: one rank)
        self.reduce: Callable[[torch.Tensor], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor
                ) -> torch.Tensor:
        """x [N, H]; each token's experts added in expert order, as the reference does,
        on the fixed grid (on a rank: its own experts', then the ranks' sums added); or,
        when the kernels are chosen (a GPU path, off the grid: docs/adr/034-fixed-grid.md),
        the fused Triton kernel (dinfer_kernels.fused_moe, GELU-tanh; other ranks' experts
        weighted 0)."""
        local = index - self.first
        if use_triton(x.device):
            mine = (local >= 0) & (local < len(self.gate_up_proj))
            out = fused_moe(x, self.gate_up_proj, self.down_proj, torch.where(mine, local, 0),
                            weights.masked_fill(~mine, 0), activation="gelu_tanh")
            return out if self.reduce is None else self.reduce(out)
        out = torch.zeros_like(x)
        for expert in torch.unique(local).tolist():
            if not 0 <= expert < len(self.gate_up_proj):
                continue  # another rank's
            slot, token = torch.where((local == expert).T)
            gate, up = fixed_grid.linear(x[token], self.gate_up_proj[expert]).chunk(2, dim=-1)
            y = fixed_grid.linear(F.gelu(gate, approximate="tanh") * up,
                                  self.down_proj[expert])
            out.index_add_(0, token, (y * weights[token, slot, None]).to(out.dtype))
        return out if self.reduce is None else self.reduce(out)


class MLP(GatedMLP):
    """Gemma's gated MLP: GatedMLP's weights with GELU (tanh) in place of SiLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Block(nn.Module):
    """Attention, then a dense MLP and the MoE branch side by side, scaled by
    layer_scalar (the decoder's; the encoder's scalar is given to forward)."""

    def __init__(self, cfg: DiffusionGemmaConfig, layer: int) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(h, cfg.intermediate_size)
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.input_layernorm = GemmaNorm(h, eps)
        self.post_attention_layernorm = GemmaNorm(h, eps)
        self.pre_feedforward_layernorm = GemmaNorm(h, eps)
        self.post_feedforward_layernorm = GemmaNorm(h, eps)
        self.post_feedforward_layernorm_1 = GemmaNorm(h, eps)
        self.post_feedforward_layernorm_2 = GemmaNorm(h, eps)
        self.pre_feedforward_layernorm_2 = GemmaNorm(h, eps)
        self.layer_scalar = nn.Parameter(torch.ones(1))

    def feed_forward(self, x: torch.Tensor, scalar: torch.Tensor) -> torch.Tensor:
        dense = self.post_feedforward_layernorm_1(self.mlp(self.pre_feedforward_layernorm(x)))
        flat = x.reshape(-1, x.shape[-1])
        weights, index = self.router(flat)
        moe = self.experts(self.pre_feedforward_layernorm_2(flat), weights, index)
        moe = self.post_feedforward_layernorm_2(moe.reshape(x.shape))
        return (x + self.post_feedforward_layernorm(dense + moe)) * scalar


class EncoderScalar(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer_scalar = nn.Parameter(torch.ones(1))


class SelfConditioning(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.pre_norm = GemmaNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_norm = GemmaNorm(cfg.hidden_size, cfg.rms_norm_eps, scaled=False)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, embeds: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        return self.post_norm(embeds + self.mlp(self.pre_norm(soft)))


class Decoder(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = GemmaNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_conditioning = SelfConditioning(cfg)


class EncoderText(nn.Module):
    """The encoder's own tensors: only each layer's scalar (the rest is the decoder's)."""

    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderScalar() for _ in range(cfg.n_layers))


class Encoder(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.language_model = EncoderText(cfg)


class Stack(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.decoder = Decoder(cfg)
        self.encoder = Encoder(cfg)


class DiffusionGemmaLM(DiffusionLM):
    """encode() fills a row's cache; denoise() gives a batch of canvases' last hidden
    states, logits() a slice of them its logits."""


    def __init__(self, cfg: DiffusionGemmaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = Stack(cfg)
        fixed_grid.adopt(self.model)  # a row's numbers independent of its batch

    read_config = staticmethod(read_config)

    def logit_positions(self, block_length: int) -> int:
        """A row holds its whole canvas's logits per step (block_length does not apply)."""
        return int(self.config.canvas_length)

    def kv_token_bytes(self) -> int:
        """One token's keys and values over every layer (each its own heads and head
        dim): what the encoder's prefix cache counts (dinfer_engine/encoder_prefix.py)."""
        cfg = self.config
        element = next(self.parameters()).element_size()
        return sum(2 * kv * d for kv, d in zip(cfg.kv_heads, cfg.head_dims, strict=True)) \
            * element

    def checkpoint_map(self, available: set[str]) -> dict[str, tuple[str, tuple | None]]:
        names = {name: (name, None) for name, _ in self.named_parameters()}
        # the self-conditioning MLP's weights sit on the block itself in the checkpoint
        return {name.replace("self_conditioning.mlp.", "self_conditioning."): target
                for name, target in names.items()}

    def ignores(self, name: str) -> bool:
        return "vision" in name or name == "lm_head.weight"

    def embedding(self) -> nn.Embedding:
        return self.model.decoder.embed_tokens

    def head_weight(self) -> torch.Tensor:
        return self.model.decoder.embed_tokens.weight  # tied

    def blocks(self) -> list[Block]:
        return [cast(Block, block) for block in self.model.decoder.layers]

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype
              ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        cfg, tables = self.config, {}
        for kind in set(cfg.layer_types):
            dim = next(d for t, d in zip(cfg.layer_types, cfg.head_dims, strict=True)
                       if t == kind)
            inv_freq = inverse_frequencies(cfg.rope[kind], dim).to(positions.device)
            angles = positions[..., None].float() * inv_freq
            emb = torch.cat([angles, angles], dim=-1)
            tables[kind] = (emb.cos().to(dtype), emb.sin().to(dtype))
        return tables

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The scaled embedding (its table split by vocabulary under tensor parallelism)."""
        scale = torch.tensor(math.sqrt(self.config.hidden_size)).to(self.head_weight().dtype)
        return self.embedding()(ids) * scale

    def encode(self, cache: Layers, ids: torch.Tensor, start: int) -> Layers:
        """Run the causal encoder over one row's new tokens ids [1, S] at positions
        start.., attending to `cache` (extended in place; sliding layers keep their
        window's last sliding_window - 1 positions), on the fixed grid's query blocks.
        Returns the new tokens' own keys and values per layer."""
        return self.encode_rows([cache], [ids[0]], [start])[0]

    def encode_rows(self, caches: list[Layers], ids: list[torch.Tensor], starts: list[int]
                    ) -> list[Layers]:
        """encode() for several rows in one forward: row r's tokens ids[r] [S_r] (S_r > 0)
        at positions starts[r].. over its cache caches[r]. The rows' tokens lie side by
        side along one sequence [1, sum S_r, H] through the norms, linears and experts
        (on the fixed grid a token's numbers do not depend on the others); rope and
        attention run per row, as for the row alone, so each row's keys/values are the
        same bits as encoding it alone. Returns each row's new keys and values per layer."""
        cfg = self.config
        ends = torch.tensor([len(t) for t in ids]).cumsum(0).tolist()
        spans = list(zip([0, *ends[:-1]], ends, strict=True))
        x = self._embed(torch.cat(ids)[None])
        positions = torch.cat([torch.arange(start, start + len(t), device=t.device)
                               for start, t in zip(starts, ids, strict=True)])
        rope = self._rope(positions[None], x.dtype)  # elementwise: each row's own bits
        scalars = [cast(EncoderScalar, s) for s in self.model.encoder.language_model.layers]
        new: list[Layers] = [[] for _ in ids]
        for i, block in enumerate(self.blocks()):
            kind = cfg.layer_types[i]
            window = cfg.sliding_window if kind == SLIDING else None
            q, k, v = block.self_attn.project(block.input_layernorm(x), rope[kind])
            heads = []
            for cache, added, start, (low, high) in zip(caches, new, starts, spans,
                                                        strict=True):
                added.append((k[:, :, low:high], v[:, :, low:high]))
                heads.append(fixed_grid.causal_blocks(q[:, :, low:high],
                                                      *self._extend(cache, i, added[-1]),
                                                      start, window))
            x = x + block.post_attention_layernorm(block.self_attn.output(
                torch.cat(heads, dim=2)))
            x = block.feed_forward(x, scalars[i].layer_scalar)
        return new

    def _extend(self, cache: Layers, layer: int, added: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """A row's keys and values of `layer` with its new ones `added` appended, which
        this layer's queries attend to; its cache then keeps them (a sliding layer, the
        last sliding_window - 1 positions)."""
        past = cache[layer] if layer < len(cache) else None
        keys, values = added if past is None else (torch.cat([past[0], added[0]], dim=2),
                                                   torch.cat([past[1], added[1]], dim=2))
        kept = keys, values
        if self.config.layer_types[layer] == SLIDING:
            kept = keys[:, :, -(self.config.sliding_window - 1):], \
                values[:, :, -(self.config.sliding_window - 1):]
        if past is None:
            cache.append(kept)
        else:
            cache[layer] = kept
        return keys, values

    def denoise(self, canvases: torch.Tensor, caches: list[Layers], positions: torch.Tensor,
                conditioning: torch.Tensor | None, rows: torch.Tensor | None = None
                ) -> torch.Tensor:
        """The decoder's normed last hidden states [B, L, H] for canvases [B, L] at
        positions [B, L] (logits() gives their logits), each row reading its own cache;
        conditioning: the previous step's probabilities (softmax of its scaled
        logits) times the embedding table, [B', L, H] (the expected embedding row;
        None: every row at a first step: zeros instead); rows [B]: each row's index in
        it, -1 for a row at its first step (None: row b is conditioning[b])."""
        cfg = self.config
        decoder = self.model.decoder
        x = self._embed(canvases)
        if conditioning is None:
            soft = torch.zeros_like(x)
        else:
            soft = conditioning * torch.tensor(math.sqrt(cfg.hidden_size)).to(x.dtype)
            if rows is not None:
                soft = soft[rows.clamp(min=0)] * (rows >= 0).to(soft.dtype)[:, None, None]
        x = decoder.self_conditioning(x, soft)
        rope = self._rope(positions, x.dtype)
        for i, block in enumerate(self.blocks()):
            cached = fixed_grid.groups(caches, i)
            q, k, v = block.self_attn.project(block.input_layernorm(x), rope[cfg.layer_types[i]])
            attn = block.self_attn.output(fixed_grid.attend_rows(q, k, v, cached))
            x = x + block.post_attention_layernorm(attn)
            x = block.feed_forward(x, block.layer_scalar)
        return decoder.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Soft-capped fp32 logits [..., V] of denoise()'s hidden states [..., H] (under
        tensor parallelism, this rank's vocabulary slice), on the fixed grid: a row's
        logits are the same bits in any slice of rows."""
        logits = fixed_grid.linear(hidden, self.head_weight()).float()
        cap = self.config.final_logit_softcapping
        return logits.div_(cap).tanh_().mul_(cap)  # tanh(logits / cap) * cap, in place

