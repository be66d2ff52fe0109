"""DiffusionGemma's prompt prefix share (docs/adr/034-fixed-grid.md): its encoder is
causal, and on the fixed grid (dinfer_engine/models/fixed_grid.py) a prompt's whole blocks of
BLOCK tokens get the same keys/values, bit for bit, whether the prompt is encoded whole
or after its prefix came from the cache. So rows whose prompts begin with the same whole
blocks encode them once (the first such row stores them; rows after it, in its batch or
in later calls on the same engine, restore them) through LLaDA2's PrefixCache
(dinfer_engine/prefix_cache.py: hash chain, byte budget, least recently used eviction, reused
tokens counted). Sliding layers restore only the window their next block reads. A
prompt's chain starts from its scope (dinfer_engine/cache_scope.py), as LLaDA2's do."""

from __future__ import annotations

from functools import partial

import torch

from dinfer_engine.cache_scope import CacheScope
from dinfer_engine.models.diffusion_gemma import SLIDING, DiffusionGemmaLM, Layers
from dinfer_engine.models.fixed_grid import BLOCK
from dinfer_engine.prefix_cache import Block, PrefixCache


def encode_prompt(model: DiffusionGemmaLM, prompt: list[int], prefix: PrefixCache | None,
                  device: torch.device, scope: CacheScope = CacheScope()
                  ) -> tuple[Layers, int]:
    """A row's encoder cache after its prompt, and how many of its tokens' keys/values
    came from `prefix` (None: no cache) instead of the encoder."""
    return encode_prompts(model, [prompt], prefix, device, [scope])[0]


def encode_prompts(model: DiffusionGemmaLM, prompts: list[list[int]],
                   prefix: PrefixCache | None, device: torch.device,
                   scopes: list[CacheScope] | None = None) -> list[tuple[Layers, int]]:
    """encode_prompt() for rows joining together, the same bits and the same reuse as one
    after the other: in waves, each one encoder forward (model.encode_rows) over the
    parts of its rows' prompts not found in `prefix`. A row waits for a later wave while
    a row before it still lacks the first block it lacks (their prompts share it), so
    that the first row holding a block computes it and the others restore it. `scopes`:
    each prompt's (default: the engine's own)."""
    scopes = scopes or [CacheScope()] * len(prompts)
    chains = [prefix.digests(p, BLOCK, scope) if prefix is not None else []
              for p, scope in zip(prompts, scopes, strict=True)]
    out: dict[int, tuple[Layers, int]] = {}
    pending = list(range(len(prompts)))
    while pending:
        wave, lacking, waiting = [], set(), []
        for row in pending:
            blocks = prefix.found(chains[row]) if prefix is not None else []
            missing = chains[row][len(blocks):]
            if missing and missing[0] in lacking:
                waiting.append(row)
            else:
                wave.append((row, blocks))
            lacking.update(missing)
        for row, cache in zip([r for r, _ in wave],
                              _encode_wave(model, [(prompts[r], chains[r], b) for r, b in wave],
                                           [scopes[r].account for r, _ in wave],
                                           prefix, device), strict=True):
            out[row] = cache
        pending = waiting
    return [out[row] for row in range(len(prompts))]


def _encode_wave(model: DiffusionGemmaLM, rows: list[tuple[list[int], list[bytes], list[Block]]],
                 accounts: list[str], prefix: PrefixCache | None, device: torch.device
                 ) -> list[tuple[Layers, int]]:
    """Each row's (prompt, digests, blocks found) cache and reused tokens: its found blocks
    restored, the rest of its prompt encoded (one forward for all), its new whole blocks
    stored in `prefix`, charged to its account."""
    caches = [restored(model, blocks) for _, _, blocks in rows]
    reused = [len(blocks) * BLOCK for _, _, blocks in rows]
    if prefix is not None:
        prefix.reused_tokens += sum(reused)
    todo = [r for r, (prompt, _, _) in enumerate(rows) if reused[r] < len(prompt)]
    if not todo:
        return list(zip(caches, reused, strict=True))
    new = model.encode_rows([caches[r] for r in todo],
                            [torch.tensor(rows[r][0][reused[r]:], device=device) for r in todo],
                            [reused[r] for r in todo])
    if prefix is not None:
        for r, added in zip(todo, new, strict=True):
            prefix.store(rows[r][1][len(rows[r][2]):], partial(_block, added), BLOCK,
                         accounts[r])
    return list(zip(caches, reused, strict=True))


def _block(added: Layers, index: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Whole block `index` of a row's newly encoded keys and values, per layer."""
    columns = slice(index * BLOCK, (index + 1) * BLOCK)
    return [k[0, :, columns].clone() for k, _ in added], \
        [v[0, :, columns].clone() for _, v in added]


def restored(model: DiffusionGemmaLM, blocks: list[Block]) -> Layers:
    """A row's cache holding the keys/values of its prompt's blocks found in the prefix
    cache (a sliding layer only the window its next query block reads)."""
    cfg, cache, reused = model.config, [], len(blocks) * BLOCK
    for layer, kind in enumerate(cfg.layer_types if blocks else ()):
        # a sliding layer's next query block reads from reused - window + 1 on (fixed_grid)
        since = max(0, reused - cfg.sliding_window + 1) if kind == SLIDING else 0
        cache.append((torch.cat([b.keys[layer] for b in blocks], dim=1)[None, :, since:],
                      torch.cat([b.values[layer] for b in blocks], dim=1)[None, :, since:]))
    return cache
