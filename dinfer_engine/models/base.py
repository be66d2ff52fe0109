"""The forward every family shares: embed, run the layers through the KV cache, normalise,
project the chosen positions onto the vocabulary. A family subclass builds its modules
with the checkpoint's own parameter names and says where they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.choices import FAMILIES, Family, key_of_class
from dinfer_engine.models.forward_inputs import CacheMode, ForwardInputs, additive, segments
from dinfer_engine.models.kv_cache import KVCache
from dinfer_engine.models.layers import rope_cos_sin


@dataclass
class ModelOutput:
    logits: torch.Tensor | None  # None when hidden states were asked for instead
    hidden: torch.Tensor | None = None  # the head's input: final-normed hidden states


class DiffusionLM(nn.Module):
    """Mask predictor: a transformer returning logits over the vocabulary.

    What the family is (its attention pattern, loop, canvas, recommended settings) is its
    registry entry's (dinfer_engine/choices.py), found by this class: `family`."""

    config: Any

    @property
    def family_key(self) -> str:
        """The FAMILIES key whose entry builds this class."""
        key = key_of_class(type(self))
        if key is None:
            raise ValueError(f"{type(self).__name__} is no family's model "
                             "(dinfer_engine/choices.py FAMILIES)")
        return key

    @property
    def family(self) -> Family:
        return FAMILIES[self.family_key]

    def logit_positions(self, block_length: int) -> int:
        """The positions whose logits a row holds per iteration: its block."""
        return block_length

    def kv_token_bytes(self) -> int:
        """One token's keys and values over every layer and head of the whole model (what
        its prefix cache counts on every rank)."""
        cfg = self.config
        element = next(self.parameters()).element_size()
        return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * element

    @staticmethod
    def read_config(raw: dict[str, Any], special_ids: dict[str, int]) -> Any:
        """The family's config from config.json's `raw` fields; mask/EOS ids the config
        lacks come from `special_ids` (the tokenizer's)."""
        raise NotImplementedError

    def checkpoint_map(self, available: set[str]) -> dict[str, tuple[str, tuple | None]]:
        """Checkpoint tensor name -> (parameter name, index into it or None for the whole
        parameter), given the names the checkpoint holds. Default: the same names."""
        return {name: (name, None) for name, _ in self.named_parameters()}

    def ignores(self, name: str) -> bool:
        """A checkpoint tensor this family skips on purpose."""
        return False

    def embedding(self) -> nn.Embedding:
        raise NotImplementedError

    def decoder_layers(self) -> nn.ModuleList:
        raise NotImplementedError

    def final_norm(self) -> nn.Module:
        raise NotImplementedError

    def head_weight(self) -> torch.Tensor:
        raise NotImplementedError

    def rotary_dim(self) -> int:
        return self.config.head_dim

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        cache_rows: torch.Tensor | None = None,
        store_cache: bool = False,
        logits_index: torch.Tensor | None = None,
        cache_columns: torch.Tensor | None = None,
        return_hidden: bool = False,
        inputs_embeds: torch.Tensor | None = None,
    ) -> ModelOutput:
        """input_ids [B, S]; position_ids [B, S] (default 0..S-1); attention_mask: bool,
        broadcastable to [B, 1, S, keys] (True = attend; [B, keys] is taken as a key mask);
        with `cache` (rows at cache slots `cache_rows`, default 0..B-1): write this span's
        keys/values into the batch's columns `cache_columns` [B, S] (-1: don't) and attend
        to the cached rows; or (no cache_columns) store this forward's keys/values as the
        rows' last S columns (`store_cache`), or read: attend to the rows' cached columns
        followed by the fresh span, the mask covering both (dinfer_engine/models/kv_cache.py,
        ADR 014); logits_index [B, K] picks the positions whose
        logits are returned (default all); return_hidden: return the final-normed hidden
        states at those positions instead of logits, for a fused head
        (dinfer_kernels.lm_head_confidence with head_weight()); inputs_embeds [B, S, d], when
        given, replaces the embedding of input_ids (iteration smoothing)."""
        b, s = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        if attention_mask is not None and attention_mask.dim() == 2:
            attention_mask = attention_mask[:, None, None, :]
        elif attention_mask is not None and attention_mask.dim() == 3:
            attention_mask = attention_mask[:, None]
        x = self.embedding()(input_ids) if inputs_embeds is None else inputs_embeds
        rope = rope_cos_sin(position_ids, self.rotary_dim(), self.config.rope_theta, x.dtype)
        inputs = self.forward_inputs(rope, attention_mask, cache, cache_rows, store_cache,
                                     cache_columns, x.dtype)
        for i, layer in enumerate(self.decoder_layers()):
            x = layer(x, inputs, i)
        if logits_index is not None:
            x = torch.gather(x, 1, logits_index[..., None].expand(-1, -1, x.shape[-1]))
        x = self.final_norm()(x)
        if return_hidden:
            return ModelOutput(logits=None, hidden=x)
        return ModelOutput(logits=F.linear(x, self.head_weight()))

    def forward_inputs(self, rope: tuple[torch.Tensor, torch.Tensor],
                       mask: torch.Tensor | None, cache: KVCache | None,
                       rows: torch.Tensor | None, store: bool, columns: torch.Tensor | None,
                       dtype: torch.dtype) -> ForwardInputs:
        """What every layer of this forward shares; masks become additive once here."""
        own = None if mask is None else additive(mask, dtype)
        if cache is None:
            return ForwardInputs(rope=rope, mask=own)
        b, s = rope[0].shape[0], rope[0].shape[2]
        if rows is None:
            rows = torch.arange(b, device=rope[0].device)
        if store:
            return ForwardInputs(rope=rope, mask=own, cache=cache,
                                 mode=CacheMode.STORE, slots=rows)
        if mask is None:
            raise ValueError("a forward reading the KV cache needs an attention mask")
        mode = CacheMode.READ if columns is None else CacheMode.WRITE
        return ForwardInputs(rope=rope, cache=cache, mode=mode, slots=rows, columns=columns,
                             segments=segments(cache, mode, rows, mask, s, dtype))

