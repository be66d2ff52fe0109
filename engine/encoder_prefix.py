"""DiffusionGemma's prompt prefix share (docs/adr/034-fixed-grid.md): its encoder is
causal, and on the fixed grid (engine/models/fixed_grid.py) a prompt's whole blocks of
BLOCK tokens get the same keys/values, bit for bit, whether the prompt is encoded whole
or after its prefix came from the cache. So rows whose prompts begin with the same whole
blocks encode them once (the first such row stores them; rows after it, in its batch or
in later calls on the same engine, restore them) through LLaDA2's PrefixCache
(engine/prefix_cache.py: hash chain, byte budget, least recently used eviction, reused
tokens counted). Sliding layers restore only the window their next block reads."""

from __future__ import annotations

import torch

from engine.models.diffusion_gemma import SLIDING, DiffusionGemmaLM, Layers
from engine.models.fixed_grid import BLOCK
from engine.prefix_cache import PrefixCache


def token_bytes(model: DiffusionGemmaLM) -> int:
    """One token's keys and values over every layer (each its own heads and head dim)."""
    cfg = model.config
    element = next(model.parameters()).element_size()
    return sum(2 * kv * d for kv, d in zip(cfg.kv_heads, cfg.head_dims, strict=True)) * element


def encode_prompt(model: DiffusionGemmaLM, prompt: list[int], prefix: PrefixCache | None,
                  device: torch.device) -> tuple[Layers, int]:
    """A row's encoder cache after its prompt, and how many of its tokens' keys/values
    came from `prefix` (None: no cache) instead of the encoder."""
    cfg, cache = model.config, []
    chain = prefix.digests(prompt, BLOCK) if prefix is not None else []
    blocks = prefix.found(chain) if prefix is not None else []
    reused = len(blocks) * BLOCK
    for layer, kind in enumerate(cfg.layer_types if blocks else ()):
        # a sliding layer's next query block reads from reused - window + 1 on (fixed_grid)
        since = max(0, reused - cfg.sliding_window + 1) if kind == SLIDING else 0
        cache.append((torch.cat([b.keys[layer] for b in blocks], dim=1)[None, :, since:],
                      torch.cat([b.values[layer] for b in blocks], dim=1)[None, :, since:]))
    if prefix is not None:
        prefix.reused_tokens += reused
    if reused == len(prompt):
        return cache, reused
    new = model.encode(cache, torch.tensor([prompt[reused:]], device=device), reused)
    if prefix is not None:
        def block(index: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
            columns = slice(index * BLOCK, (index + 1) * BLOCK)
            return ([k[0, :, columns].clone() for k, _ in new],
                    [v[0, :, columns].clone() for _, v in new])
        prefix.store(chain[len(blocks):], block, BLOCK)
    return cache, reused
