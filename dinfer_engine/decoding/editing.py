"""LLaDA2.1's joint threshold decoding with token editing (docs/adr/021-token-editing.md).

Per row and iteration, over the row's current block, with the model's prediction (token
and its probability) at every answer position of the block:
- mask to token (M2T): every masked position whose confidence is above `threshold`
  becomes its predicted token; when fewer than `num_to_transfer` are, the
  `num_to_transfer` most confident masked positions do (all, if fewer are masked);
- token to token (T2T): every position of the block that held a token (not a mask, not
  the prompt) at the iteration's start is rewritten with its predicted token when that
  token differs and its confidence is above `editing_threshold`.
Once no mask is left in the block, each further forward is a post-step: the block is done
after a post-step that edits nothing, after `max_post_steps` post-steps, or at once when
max_post_steps is 0. This is the published `generate` of LLaDA2.1, which decodes one
sequence; here every row keeps its own count of post-steps, so rows move at their own pace
and a row's tokens do not depend on its batch mates.

Only the current block is ever edited, so finished blocks are final: block diffusion's
cache of finished blocks stays exact, and early stop waits until a stop token lies in a
finished block (`editable_from`), as the published loop checks for EOS after each block.
"""

from __future__ import annotations

import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.decoding.decoders import (
    Decoder,
    Prediction,
    block_threshold_counts,
    select_most_confident,
)

BLOCK_POST_STEPS = "editing_block_post_steps"  # the current block's post-steps so far
EDITED_TOKENS = "edited_tokens"  # reported per row: tokens rewritten (T2T)
POST_STEPS = "post_steps"  # reported per row: post-step forwards over all its blocks


class EditingDecoder(Decoder):
    def setup(self, batch: RunningBatch) -> None:
        batch.add_state(BLOCK_POST_STEPS, (), torch.long)
        batch.add_state(EDITED_TOKENS, (), torch.long, report=True)
        batch.add_state(POST_STEPS, (), torch.long, report=True)

    def predicted_positions(self, masked: torch.Tensor, batch: RunningBatch) -> torch.Tensor:
        """Every answer position of the block (masked or not); prompt columns are never
        edited (block diffusion's first block may hold the prompt's end)."""
        answer_start = batch.pad + batch.prompt_length
        return batch.block_columns() >= answer_start[:, None]

    def choose(self, prediction: Prediction, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens [B, S] and the positions to write: M2T's masks and T2T's edits."""
        answer = self.predicted_positions(masked, batch)
        tokens, confidence = self.predict(prediction, answer, batch)
        masked_confidence = torch.where(masked, confidence, -torch.inf)
        least = torch.full_like(batch.step, self.config.num_to_transfer)
        counts = block_threshold_counts(masked_confidence, threshold, least)
        fill = select_most_confident(masked_confidence, counts) & masked
        current = batch.ids.gather(1, batch.block_columns())
        edit = (answer & ~masked & (confidence > self.config.editing_threshold)
                & (tokens != current))
        return tokens, fill | edit

    def block_done(self, masked: torch.Tensor, commit: torch.Tensor,
                   batch: RunningBatch) -> torch.Tensor:
        """Count this iteration's edits and post-step; a row's block is done when no mask
        is left and either it has had max_post_steps post-steps or this post-step edited
        nothing."""
        edited = commit & ~masked
        post_step = ~masked.any(-1)  # the block had no mask before this forward
        block_posts = batch.state[BLOCK_POST_STEPS]
        block_posts += post_step
        batch.state[POST_STEPS] += post_step
        batch.state[EDITED_TOKENS] += edited.sum(-1)
        no_mask_left = ~(masked & ~commit).any(-1)
        settled = post_step & ~edited.any(-1)
        done = no_mask_left & ((block_posts >= self.config.max_post_steps) | settled)
        block_posts.masked_fill_(done, 0)
        return done

    def editable_from(self, batch: RunningBatch) -> torch.Tensor:
        """The current block's first answer index: tokens from there on may be edited."""
        answer_start = batch.pad + batch.prompt_length
        return (batch.block_columns()[:, 0] - answer_start).clamp(min=0)
