"""The decoder of a batch with constrained rows: the wrapped decoder predicts, then each
constrained row's tokens become its block's most probable completion that its automaton
accepts (engine/constraints/block_dp.py), with their confidences, and the wrapped
decoder picks which of them to commit. Whatever it commits, the completion stays
possible: committed tokens are fixed in the next iteration's programme, which can always
choose the rest of this completion again.

A block may end only in a state from which the answer can still reach `done` (a stop
token after an accepting state) within the answer columns left; when no such ending
exists (the canvas is too short), it ends in any state that could complete, so the
answer is a valid prefix that ends without a stop token: finish_reason "length".

Unconstrained rows keep the wrapped decoder's choice untouched. On the fused-head path
the prediction holds hidden states, not logits: constrained rows project theirs."""

from __future__ import annotations

import torch

from engine.batch import RunningBatch
from engine.constraints.automaton import UNREACHABLE, TokenAutomaton
from engine.constraints.block_dp import best_completion
from engine.decoding.decoders import Decoder, Prediction
from engine.parallel import vocab


class ConstrainedDecoder(Decoder):
    def __init__(self, inner: Decoder) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.needs_logits = inner.needs_logits
        # per request: answer tokens walked so far and the state they lead to
        self._walked: dict[int, tuple[int, int]] = {}

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
        groups: dict[int, tuple[TokenAutomaton, list[int]]] = {}
        for row, request in enumerate(batch.requests):
            if request.constraint is not None:
                groups.setdefault(id(request.constraint), (request.constraint, []))[1].append(row)
        for automaton, rows in groups.values():
            index = torch.tensor(rows, device=batch.device)
            chosen, sure, active = self._constrain(automaton, index, prediction, masked, batch)
            replace = masked[index] & active
            tokens[index] = torch.where(replace, chosen, tokens[index])
            confidence[index] = torch.where(replace, sure.to(confidence.dtype), confidence[index])
        return tokens, self.inner.commit(confidence, masked, threshold, batch) & masked

    def _constrain(self, automaton: TokenAutomaton, rows: torch.Tensor, prediction: Prediction,
                   masked: torch.Tensor, batch: RunningBatch
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows' best accepted completion [R, S], each token's probability, and which
        block positions are answer positions."""
        logits = vocab.full(prediction.logits_of(rows)).to(torch.float64)  # [R, S, V]
        scores = logits
        temperature = self.config.temperature
        if temperature > 0:  # Gumbel noise from each row's own generator
            noise = torch.stack([
                torch.rand(logits.shape[1:], generator=_generator(batch, int(r)),
                           dtype=torch.float64, device=logits.device) for r in rows.tolist()])
            scores = logits / temperature - torch.log(-torch.log(noise))
        columns = batch.block_columns()[rows]
        answer_start = (batch.pad + batch.prompt_length)[rows]
        answer_end = answer_start + batch.gen_length
        active = (columns >= answer_start[:, None]) & (columns < answer_end[:, None])
        current = batch.ids[rows].gather(1, columns)
        fixed = torch.where(masked[rows] | ~active, -1, current)
        starts = (columns[:, 0] - answer_start).clamp(min=0).tolist()
        start = torch.tensor([self._state_before(automaton, batch, r, a, n)
                              for r, a, n in zip(rows.tolist(), answer_start.tolist(), starts,
                                                 strict=True)], device=batch.device)
        left = (answer_end - columns[:, -1] - 1).clamp(min=0)  # answer columns after the block
        distance = automaton.to(batch.device).distance
        end_ok = distance[None, :] <= left[:, None]
        fallback = (distance < UNREACHABLE).expand_as(end_ok)
        chosen = best_completion(automaton, scores, fixed, active, start, end_ok, fallback)
        picked = chosen.clamp(min=0)
        sure = torch.exp(logits.gather(-1, picked[..., None]).squeeze(-1)
                         - torch.logsumexp(logits, dim=-1))
        return picked, sure, active

    def _state_before(self, automaton: TokenAutomaton, batch: RunningBatch, row: int,
                      answer_start: int, before: int) -> int:
        """The automaton's state after the row's `before` answer tokens ahead of its
        current block (all committed: blocks are decoded in order, so only the tokens of
        blocks finished since the last call are walked)."""
        key = id(batch.requests[row])
        walked, state = self._walked.get(key, (0, automaton.initial))
        if walked < before:
            state = automaton.walk(state, batch.ids[row, answer_start + walked:
                                                    answer_start + before].tolist())
            if state < 0:
                raise RuntimeError("a constrained row holds tokens its automaton refuses")
            self._walked[key] = (before, state)
        return state


def _generator(batch: RunningBatch, row: int) -> torch.Generator:
    generator = batch.requests[row].generator
    if generator is None:
        raise ValueError("a sampled row has no generator")
    return generator
