"""The sampling controls of a batch's rows (dinfer_engine/sampling_controls.py), applied to
the logits a step scores before the decoder reads them (dinfer_engine/decoding/prediction.py),
in place, row by row (docs/adr/060-sampling-controls.md).

At every step, at each position of a row's block, in this order (vLLM's):
- `logit_bias`: each listed token's logit plus its bias;
- the penalties, for each token the row's answer holds (its committed tokens, not masks;
  a position's own token not counted against itself, which only an editing decoder reads):
  repetition (a positive logit divided by it, another multiplied), then minus frequency x
  the token's count, then minus presence;
- the stop tokens (EOS and the model's other end tokens) at -inf at the answer's first
  `min_tokens` positions, at every answer position with `ignore_eos`.
`min_p` narrows what a sampled position may draw (decoders.sample, beside top_k / top_p).

Each row's values are per-row state (`RunningBatch.add_state`), written once when the row
joins; each operation is elementwise within a row, and a neutral row's values leave its
logits' bits as they were, so a row's tokens do not depend on its neighbours. Memory: the
penalties touch only the tokens an answer holds ([rows, answer, block] values, never
[rows, vocabulary] counts), the bias only its listed ids. A run whose rows are all neutral
builds none of it (RowControls.of is None). Under tensor parallelism each rank changes the
ids of its vocabulary slice; every value a rank reads is its own, so the ranks agree."""

from __future__ import annotations

import torch

from dinfer_engine.batch import Request, RunningBatch
from dinfer_engine.parallel import vocab

FILLED = "controls_filled"  # the row's values are in the state below
BIAS_IDS = "controls_bias_ids"  # [K] token ids (-1: no entry)
BIAS_VALUES = "controls_bias_values"  # [K]
PENALTIES = "controls_penalties"  # [3]: presence, frequency, repetition
BANNED_BEFORE = "controls_banned_before"  # answer index before which stops are banned
MIN_P = "controls_min_p"  # read by decoders.sample


class RowControls:
    """The controls of a run's rows: what its requests ask decides which state exists."""

    def __init__(self, requests: list[Request], stop_ids: list[int]) -> None:
        controls = [r.controls for r in requests]
        self.bias_width = max(len(c.logit_bias) for c in controls)
        self.penalised = any(c.penalised for c in controls)
        self.bans = any(c.stops_banned_before for c in controls)
        self.min_p = any(c.min_p for c in controls)
        self.stop_ids = stop_ids

    @classmethod
    def of(cls, requests: list[Request], stop_ids: list[int]) -> RowControls | None:
        """The run's controls; None when every row is neutral (nothing to do)."""
        if all(r.controls.neutral for r in requests):
            return None
        return cls(requests, stop_ids)

    def setup(self, batch: RunningBatch) -> None:
        """Register the per-row state the run's controls need, before any row joins."""
        batch.add_state(FILLED, (), torch.bool)
        if self.bias_width:
            batch.add_state(BIAS_IDS, (self.bias_width,), torch.long)
            batch.add_state(BIAS_VALUES, (self.bias_width,), torch.float64)
        if self.penalised:
            batch.add_state(PENALTIES, (3,), torch.float64)
        if self.bans:
            batch.add_state(BANNED_BEFORE, (), torch.long)
        if self.min_p:
            batch.add_state(MIN_P, (), torch.float64)

    def apply(self, logits: torch.Tensor, batch: RunningBatch) -> None:
        """Change the block's logits [B, S, V] (this rank's slice), in place."""
        self._fill(batch)
        columns = batch.block_columns()
        if self.bias_width:
            _bias(logits, batch.state[BIAS_IDS], batch.state[BIAS_VALUES])
        if self.penalised:
            _penalise(logits, batch, columns)
        if self.bans:
            self._ban(logits, batch, columns)

    def _fill(self, batch: RunningBatch) -> None:
        """Write the values of the rows that joined since the last step."""
        state = batch.state
        joined = (~state[FILLED]).nonzero().squeeze(1).tolist()
        if not joined:
            return
        rows = torch.tensor(joined, device=batch.device)
        controls = [batch.requests[i].controls for i in joined]
        if self.bias_width:
            ids = [[t for t, _ in c.logit_bias] for c in controls]
            values = [[v for _, v in c.logit_bias] for c in controls]
            state[BIAS_IDS][rows] = _padded(ids, self.bias_width, -1, torch.long, batch)
            state[BIAS_VALUES][rows] = _padded(values, self.bias_width, 0.0, torch.float64,
                                               batch)
        if self.penalised:
            state[PENALTIES][rows] = torch.tensor(
                [[c.presence_penalty, c.frequency_penalty, c.repetition_penalty]
                 for c in controls], dtype=torch.float64, device=batch.device)
        if self.bans:
            state[BANNED_BEFORE][rows] = torch.tensor(
                [c.stops_banned_before for c in controls], device=batch.device)
        if self.min_p:
            state[MIN_P][rows] = torch.tensor([c.min_p for c in controls],
                                              dtype=torch.float64, device=batch.device)
        state[FILLED][rows] = True

    def _ban(self, logits: torch.Tensor, batch: RunningBatch, columns: torch.Tensor) -> None:
        """The stop tokens at -inf at the answer positions before each row's limit."""
        index = columns - (batch.pad + batch.prompt_length)[:, None]
        limit = torch.minimum(batch.region, batch.state[BANNED_BEFORE])
        banned = (index >= 0) & (index < limit[:, None])
        local, inside = _owned(torch.tensor(self.stop_ids, device=logits.device))
        for token in local[inside].tolist():
            logits[..., token].masked_fill_(banned, -torch.inf)


def _padded(rows: list[list[float]] | list[list[int]], width: int, fill: float,
            dtype: torch.dtype, batch: RunningBatch) -> torch.Tensor:
    return torch.tensor([row + [fill] * (width - len(row)) for row in rows], dtype=dtype,
                        device=batch.device)


def _owned(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global token ids as this rank's local indices, and whether it holds each."""
    split = vocab.current()
    if split is None:
        return ids, ids >= 0
    local, inside = split.owns(ids)
    return local, inside & (ids >= 0)


def _bias(logits: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> None:
    """Each row's listed tokens' logits plus their bias, at every block position."""
    local, inside = _owned(ids)
    rows, slots = inside.nonzero(as_tuple=True)
    if len(rows):
        tokens = local[rows, slots]
        logits[rows, :, tokens] += values[rows, slots, None].to(logits.dtype)


def held_tokens(batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct tokens each row's answer holds: (row, token, count) [N] each."""
    start = batch.pad + batch.prompt_length
    index = torch.arange(batch.region_limit, device=batch.device)
    columns = (start[:, None] + index).clamp(max=batch.width - 1)
    held = torch.where(index < batch.region[:, None], batch.ids.gather(1, columns),
                       batch.mask_id)
    tokens = held.sort(-1).values
    first = torch.ones_like(tokens, dtype=torch.bool)
    first[:, 1:] = tokens[:, 1:] != tokens[:, :-1]
    group = first.cumsum(-1) - 1
    counts = torch.zeros_like(tokens).scatter_add_(1, group, torch.ones_like(tokens))
    rows, slots = (first & (tokens != batch.mask_id)).nonzero(as_tuple=True)
    return rows, tokens[rows, slots], counts[rows, group[rows, slots]]


def _penalise(logits: torch.Tensor, batch: RunningBatch, columns: torch.Tensor) -> None:
    """The penalties of the tokens each row's answer holds, at every block position."""
    rows, tokens, counts = held_tokens(batch)
    local, inside = _owned(tokens)
    rows, tokens, local, counts = rows[inside], tokens[inside], local[inside], counts[inside]
    if not len(rows):
        return
    start = (batch.pad + batch.prompt_length)[rows, None]
    own = (columns[rows] >= start) & (columns[rows] < start + batch.region[rows, None]) \
        & (batch.ids[rows].gather(1, columns[rows]) == tokens[:, None])
    times = (counts[:, None] - own.long()).to(logits.dtype)  # [N, S]
    presence, frequency, repetition = (
        value[:, None].to(logits.dtype) for value in batch.state[PENALTIES][rows].unbind(-1))
    scores = logits[rows, :, local]
    penalised = torch.where(scores > 0, scores / repetition, scores * repetition)
    penalised = penalised - frequency * times - presence
    logits[rows, :, local] = torch.where(times > 0, penalised, scores)
