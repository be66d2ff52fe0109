"""The training objective: LLaDA's masked-diffusion SFT loss, mixed on a share of the rows
with LLaDA2.1's token-editing objective.

Every answer-region token is masked with probability t ~ U(eps, 1) per row; the loss on
masked positions is the cross-entropy weighted by 1/t (LLaDA). In an editing row
(probability `edit_share`) a further share c ~ U(0, max_corrupt) of the unmasked region
tokens is replaced by random tokens (any character or EOS); the model is trained to
restore them (weight 1) and, at a small weight, to keep the other unmasked region tokens
(so an editing decoder, which re-predicts placed tokens and replaces those the model is
confident are wrong, finds confident identity predictions at correct ones). The sum is
averaged over region tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dinfer_engine.models.llada import LLaDAModelLM
from dinfer_training.batches import Batch

EPS = 1e-3
KEEP_WEIGHT = 0.1
FIRST_CHAR_ID = 4  # ids 0-3: pad, eos, unk, mask


def corrupt(ids: torch.Tensor, candidates: torch.Tensor, gen: torch.Generator,
            eos_id: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace the `candidates` positions by random tokens (characters or EOS), never by
    the token already there; returns the new ids and the positions that changed."""
    noise = torch.randint(FIRST_CHAR_ID - 1, vocab_size, ids.shape, generator=gen)
    noise = torch.where(noise == FIRST_CHAR_ID - 1, torch.full_like(noise, eos_id), noise)
    changed = candidates & (noise != ids)
    return torch.where(changed, noise, ids), changed


def training_loss(model: LLaDAModelLM, batch: Batch, mask_id: int, eos_id: int,
                  gen: torch.Generator, edit_share: float = 0.0,
                  max_corrupt: float = 0.3) -> torch.Tensor:
    ids, region = batch.ids, batch.region
    b = ids.shape[0]
    t = (1 - EPS) * torch.rand(b, 1, generator=gen) + EPS
    masked = region & (torch.rand(ids.shape, generator=gen) < t)
    weights = torch.where(masked, 1 / t.expand_as(ids), torch.zeros(ids.shape))
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    if edit_share > 0:
        editing = torch.rand(b, 1, generator=gen) < edit_share
        share = max_corrupt * torch.rand(b, 1, generator=gen)
        kept = region & ~masked & editing
        candidates = kept & (torch.rand(ids.shape, generator=gen) < share)
        noisy, corrupted = corrupt(noisy, candidates, gen, eos_id, model.config.vocab_size)
        weights = weights + corrupted.float() + KEEP_WEIGHT * (kept & ~corrupted).float()
    scored = weights > 0
    logits = model(noisy, attention_mask=batch.keys).logits
    ce = F.cross_entropy(logits[scored].float(), ids[scored], reduction="none")
    return (ce * weights[scored]).sum() / region.sum()
