"""The infill canvas (dinfer_engine/infill.py builds its rows): a row's region is the prompt's
gaps and the text between and after them (Request.canvas: masks at the gaps), decoded
in place by bidirectional models; rows without one are ordinary MaskCanvas rows of the
same batch."""

from __future__ import annotations

import torch

from dinfer_engine.batch import Request, RunningBatch
from dinfer_engine.canvas.masked import MaskCanvas
from dinfer_engine.decoding.mdlm_schedule import mdlm_counts

INFILL = "infill"  # per-row state: the row's region is an infill canvas
SCHEDULE = "mdlm_counts"  # per-row state: its block's MDLM schedule


class InfillCanvas(MaskCanvas):
    """An infill row's blocks count from its first mask (so from the prompt's end, the
    canvas starting there); a last block that would run past the row is moved left to end
    with it (RunningBatch.block_columns), and blocks holding no mask are skipped, so no
    forward is spent on given text, which no decoder writes (it is not masked). A fixed
    schedule follows dllm's MDLM schedule of the block's masks
    (dinfer_engine/decoding/mdlm_schedule.py). An infill row never ends early: every gap is
    decoded."""

    def region(self, request: Request) -> list[int]:
        return super().region(request) if request.canvas is None else request.canvas

    def setup(self, batch: RunningBatch) -> None:
        batch.add_state(INFILL, (), torch.bool)
        batch.add_state(SCHEDULE, (self.config.steps_per_block,), torch.long)

    def joined(self, batch: RunningBatch, requests: list[Request]) -> None:
        flags = torch.tensor([r.canvas is not None for r in requests], device=batch.device)
        batch.state[INFILL][-len(requests):] = flags
        self.advance(batch)

    def advance(self, batch: RunningBatch) -> None:
        """Move rows past blocks that hold no mask."""
        if not batch.state[INFILL].any():
            return
        while True:
            empty = ~(batch.ids.gather(1, batch.block_columns()) == batch.mask_id).any(-1)
            skip = empty & ~batch.done()
            if not skip.any():
                return
            batch.block += skip

    def scheduled(self, batch: RunningBatch, masked: torch.Tensor, counts: torch.Tensor
                  ) -> torch.Tensor:
        """Each infill row's count at its step in its block's MDLM schedule, worked out
        as the block starts."""
        infill, state = batch.state[INFILL], batch.state[SCHEDULE]
        starting = infill & (batch.step == 0)
        if starting.any():
            state[starting] = mdlm_counts(masked[starting].sum(-1), state.shape[1])
        own = state.gather(1, batch.step.clamp(max=state.shape[1] - 1)[:, None]).squeeze(1)
        return torch.where(infill, own, counts)

    def may_end_early(self, batch: RunningBatch) -> torch.Tensor:
        return ~batch.state[INFILL]
