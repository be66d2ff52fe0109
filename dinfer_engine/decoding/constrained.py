"""The decoder of a batch with constrained rows: the wrapped decoder predicts, then each
constrained row's block becomes its witness (dinfer_engine/constraints/witness.py): the
proposals the grammar accepts, checked left to right, and where one fails the best token
the grammar allows by the model's own scores. The wrapped decoder then picks which
positions to commit, from the witness's tokens only, so whatever is committed can still
be completed. Confidences are each witness token's probability under the row's logits.
A witness is kept only if the answer can still be completed and a stop token written
within the canvas after it; otherwise the proposals that would not fit give way to
tokens of a path that does (RowWitness.search, the room bound).

Sampled rows choose among the allowed tokens by Gumbel-max with noise from their own
generator (as decoders.sample does), so a row's answer never depends on its neighbours.
Unconstrained rows keep the wrapped decoder's choice untouched. On the fused-head path
the prediction holds hidden states, not logits: constrained rows project theirs; under
tensor parallelism their logits are gathered and every rank builds the same witness."""

from __future__ import annotations

import numpy as np
import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.constraints.witness import RowWitness
from dinfer_engine.decoding.decoders import Decoder, Prediction
from dinfer_engine.decoding.slices import float64_bytes, slices
from dinfer_engine.parallel import vocab


class ConstrainedDecoder(Decoder):
    def __init__(self, inner: Decoder) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.needs_logits = inner.needs_logits
        self._rows: dict[int, RowWitness] = {}  # by id(request)

    def setup(self, batch: RunningBatch) -> None:
        self.inner.setup(batch)

    def predict(self, prediction: Prediction, masked: torch.Tensor,
                batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.predict(prediction, masked, batch)

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        return self.inner.commit(confidence, masked, threshold, batch)

    def choose(self, prediction: Prediction, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, confidence = self.inner.predict(prediction, masked, batch)
        rows = [r for r, request in enumerate(batch.requests) if request.constraint is not None]
        self._forget(batch)
        if rows:
            index = torch.tensor(rows, device=batch.device)
            chosen, active = self._witnesses(rows, prediction, tokens[index], masked[index],
                                             batch)
            replace = masked[index] & active
            tokens[index] = torch.where(replace, chosen, tokens[index])
            kept = confidence[index]
            kept[replace] = self._confidences(prediction, index, replace, chosen
                                              ).to(confidence.dtype)
            confidence[index] = kept
        return tokens, self.inner.commit(confidence, masked, threshold, batch) & masked

    @staticmethod
    def _confidences(prediction: Prediction, index: torch.Tensor, replace: torch.Tensor,
                     chosen: torch.Tensor) -> torch.Tensor:
        """The probability of each witness token written [N] under its position's softmax,
        in float64 (it decides which positions commit): from the log-sum-exp the wrapped
        decoder computed over the same logits where it did, else over the vocabulary
        again, a slice of positions at a time."""
        normaliser, logits = prediction.log_normaliser, prediction.logits
        if normaliser is not None and logits is not None:
            ids = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
            ids[index] = chosen
            scores = vocab.take(logits, ids)[index][replace].to(torch.float64)
            return torch.exp(scores - normaliser[index][replace])
        at_row, at_column = replace.nonzero(as_tuple=True)
        written = chosen[replace]
        rows = index[at_row]
        parts = []
        for part in slices(len(written), float64_bytes(prediction.width)):
            scores = vocab.full(prediction.logits_at(rows[part], at_column[part])
                                ).to(torch.float64)  # [n, V]
            parts.append(torch.exp(scores.gather(-1, written[part][:, None]).squeeze(-1)
                                   - torch.logsumexp(scores, dim=-1)))
        return torch.cat(parts)

    def _forget(self, batch: RunningBatch) -> None:
        """Drop the witnesses of rows that left the batch (their matchers and masks)."""
        present = {id(request) for request in batch.requests}
        for gone in [key for key in self._rows if key not in present]:
            del self._rows[gone]

    def _witnesses(self, rows: list[int], prediction: Prediction, proposed: torch.Tensor,
                   masked: torch.Tensor, batch: RunningBatch
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's witness tokens [R, S] (the proposal outside the answer) and which
        block positions are answer positions. A row's logits over the whole vocabulary
        are read (gathered, projected) only when its witness asks for the best token."""
        columns = batch.block_columns()[rows]
        answer_start = (batch.pad + batch.prompt_length)[rows]
        # the answer's columns: gen_length of them. The canvas may hold more (whole
        # blocks), whose tokens are cut from the answer: the witness ends within it (ADR 059)
        active = (columns >= answer_start[:, None]) \
            & (columns < answer_start[:, None] + self.config.gen_length)
        current = batch.ids[rows].gather(1, columns)
        chosen = proposed.clone()
        starts = (columns[:, 0] - answer_start).clamp(min=0).tolist()
        held = torch.where(masked, -1, current).tolist()
        wanted, on = proposed.tolist(), active.tolist()
        # answer columns after each block position
        left = (answer_start[:, None] + self.config.gen_length - 1 - columns).tolist()
        for k, row in enumerate(rows):
            witness = self._row(batch, row, int(answer_start[k]), starts[k])
            slots = [i for i, a in enumerate(on[k]) if a]
            if not slots:
                continue
            logits: list[torch.Tensor] = []  # the row's [S, V], once asked for

            def best(i: int, allowed: np.ndarray, slots: list[int] = slots, row: int = row,
                     logits: list[torch.Tensor] = logits) -> int:
                if not logits:
                    logits.append(vocab.full(prediction.logits_at(row)))
                return self._best(logits[0][slots[i]], allowed, batch, row)

            found = witness.search([held[k][i] if held[k][i] >= 0 else None for i in slots],
                                   [wanted[k][i] for i in slots], best,
                                   max(left[k][slots[-1]], 0))
            chosen[k, slots] = torch.tensor(found, device=chosen.device)
        return chosen, active

    def _best(self, logits: torch.Tensor, allowed: np.ndarray, batch: RunningBatch,
              row: int) -> int:
        """The allowed token of highest score: the logit, or at temperature > 0 the logit
        over the temperature plus Gumbel noise from the row's generator (a sample of the
        allowed tokens' distribution; top_k / top_p do not narrow it)."""
        scores = logits  # greedy: float64 would not change the argmax
        temperature = self.config.temperature
        if temperature > 0:
            scores = logits.to(torch.float64)
            generator = batch.requests[row].generator
            if generator is None:
                raise ValueError("a sampled row has no generator")
            noise = torch.rand(scores.shape, generator=generator, dtype=torch.float64,
                               device=scores.device)
            scores = scores / temperature - torch.log(-torch.log(noise))
        if scores.device.type == "cpu":  # one row: numpy, no parallel region per call
            values = (scores.float() if scores.dtype == torch.bfloat16 else scores).numpy()
            # the first maximum among the allowed ids, as over the whole row with the
            # others at -inf, without writing a vocabulary-sized copy
            ids = np.flatnonzero(allowed)
            return int(ids[values[ids].argmax()])
        keep = torch.from_numpy(allowed).to(scores.device)
        return int(torch.where(keep, scores, -torch.inf).argmax())

    def _row(self, batch: RunningBatch, row: int, answer_start: int, before: int
             ) -> RowWitness:
        """The row's witness state, moved past the answer tokens ahead of its current block
        (all committed: blocks are decoded in order)."""
        request = batch.requests[row]
        assert request.constraint is not None
        witness = self._rows.get(id(request))
        if witness is None:
            witness = self._rows[id(request)] = RowWitness(request.constraint)
        if witness.walked < before:
            witness.advance(batch.ids[row, answer_start + witness.walked:
                                      answer_start + before].tolist())
        return witness
