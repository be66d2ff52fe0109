"""Choosing tokens and which of them to commit, per iteration, over each row's block.

Each decoder is an object whose `choose(prediction, masked, threshold, batch)` returns
the predicted tokens [B, S] and the bool [B, S] of positions to write (masked positions,
at least one per row that has a mask; a decoder that edits, dinfer_engine/decoding/editing.py,
also rewrites tokens it placed). `threshold` [B] is the iteration's threshold per row
(the iteration strategy may anneal it). `block_done` says which rows have finished their
block, `predicted_positions` where the decoder reads predictions, `editable_from` from
where in the answer written tokens may still change. Decoders that keep state keep it per
row in the running batch, so a row's choices never depend on its batch mates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dinfer_engine.batch import RunningBatch
from dinfer_engine.decoding.controls import MIN_P
from dinfer_engine.decoding.slices import float64_bytes, slices
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.parallel import vocab


def linear_schedule(block_length: int, steps: int) -> torch.Tensor:
    """Tokens to commit at each of a block's `steps` steps: block_length spread evenly,
    the first `block_length % steps` steps taking one more (LLaDA's
    get_num_transfer_tokens for a block that starts all masks)."""
    counts = torch.full((steps,), block_length // steps, dtype=torch.long)
    counts[: block_length % steps] += 1
    return counts


def sample(logits: torch.Tensor, temperature: float, generators: list[torch.Generator | None],
           banned: int, top_k: int = 0, top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted tokens [B, S] and their confidence: probability under softmax(logits), in
    float64 as LLaDA. temperature 0 takes the argmax; otherwise Gumbel-max with noise
    drawn from each row's own generator, so a row's draws do not depend on the batch,
    over the tokens that top_k / top_p keep (see keep_top). Token `banned` (the mask) is
    never predicted: LLaDA's loop would re-mask it, which no trained model asks for;
    confidences still use the untouched softmax, computed as exp(logit - logsumexp) to
    hold one float64 copy of the logits, not two. Under tensor parallelism the logits are
    this rank's vocabulary slice and every step reduces across ranks
    (dinfer_engine/parallel/vocab.py). Rows go a slice at a time (dinfer_engine/decoding/slices.py):
    the same tokens and confidences as all at once, one slice's float64 copy held."""
    tokens, confidence, _ = sample_scored(logits, temperature, generators, banned, top_k,
                                          top_p)
    return tokens, confidence


def sample_scored(logits: torch.Tensor, temperature: float,
                  generators: list[torch.Generator | None], banned: int, top_k: int = 0,
                  top_p: float = 1.0, min_p: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sample() and each position's float64 log-sum-exp of the logits, from which any
    token's confidence follows without another pass over the vocabulary. `min_p`: each
    row's [B] (None: none), which a sampled position's draw honours (keep_min_p)."""
    position = float64_bytes(logits.shape[-1]) * (logits.shape[1] if logits.dim() > 1 else 1)
    parts = [_sample(logits[rows], temperature, generators[rows], banned, top_k, top_p,
                     None if min_p is None else min_p[rows])
             for rows in slices(logits.shape[0], position)]
    if len(parts) == 1:
        return parts[0]
    tokens, confidence, normaliser = zip(*parts, strict=True)
    return torch.cat(tokens), torch.cat(confidence), torch.cat(normaliser)


def _sample(logits: torch.Tensor, temperature: float,
            generators: list[torch.Generator | None], banned: int, top_k: int,
            top_p: float, min_p: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sample_scored() over some rows."""
    logits = logits.to(torch.float64, copy=True)
    log_normaliser = vocab.logsumexp(logits)  # before the ban: LLaDA's softmax
    vocab.ban(logits, banned)
    if temperature == 0:  # the argmax is always among the tokens top_k / top_p keep
        tokens = vocab.argmax(logits)
    else:
        keep_top(logits, temperature, top_k, top_p)
        if min_p is not None:
            keep_min_p(logits, temperature, min_p)
        noise = torch.stack([vocab.uniform(logits.shape[1:], _seeded(g), logits.device)
                             for g in generators])
        # argmax of exp(logits) / (-log u) ** temperature, LLaDA's add_gumbel_noise
        tokens = vocab.argmax(logits - temperature * torch.log(-torch.log(noise)))
    chosen = vocab.take(logits, tokens)
    return tokens, torch.exp(chosen - log_normaliser), log_normaliser


def _seeded(generator: torch.Generator | None) -> torch.Generator:
    """A sampled row's generator (the engine gives one to every row that samples)."""
    if generator is None:
        raise ValueError("a sampled row has no generator")
    return generator


def keep_top(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> None:
    """Set to -inf, in place, every logit outside the top_k largest (0: no limit) and then
    outside the nucleus: the fewest most likely tokens of softmax(logits / temperature)
    whose probabilities reach top_p (the most likely token always stays). Works along the
    last dimension only, so each position of each row is filtered on its own. Under tensor
    parallelism the nucleus is every token at least as likely as the least likely one it
    needs (dinfer_engine/parallel/vocab.py: nucleus_floor), which differs from the sorted cut
    only on exact ties at its edge."""
    split = vocab.current()
    if 0 < top_k < (logits.shape[-1] if split is None else split.total):
        kth = vocab.topk(logits, top_k)[0][..., -1:]
        logits.masked_fill_(logits < kth, -torch.inf)
    if top_p < 1 and split is not None:
        probs = vocab.softmax(logits / temperature)
        logits.masked_fill_(probs < vocab.nucleus_floor(probs, top_p)[..., None], -torch.inf)
    elif top_p < 1:
        probs, order = torch.softmax(logits / temperature, dim=-1).sort(-1, descending=True)
        before = probs.cumsum(-1) - probs  # probability of the more likely tokens
        logits.masked_fill_(torch.zeros_like(before, dtype=torch.bool)
                            .scatter_(-1, order, before >= top_p), -torch.inf)


def keep_min_p(logits: torch.Tensor, temperature: float, min_p: torch.Tensor) -> None:
    """Set to -inf, in place, every logit [B, S, V] whose probability under
    softmax(logits / temperature) is below its row's min_p [B] times its position's
    largest (vLLM's min_p: logit < max + temperature x log(min_p)); 0 keeps every token,
    1 only the most likely. Confidences are untouched, as by top_k / top_p."""
    floor = vocab.amax(logits) + temperature * torch.log(min_p)[:, None]
    logits.masked_fill_(logits < floor[..., None], -torch.inf)


def threshold_counts(confidence: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Fast-dLLM: every masked position at or above its row's `threshold` [B], and at
    least one."""
    return (confidence >= threshold[:, None]).sum(-1).clamp(min=1)


def block_threshold_counts(confidence: torch.Tensor, threshold: torch.Tensor,
                           scheduled: torch.Tensor) -> torch.Tensor:
    """LLaDA2's generate: every masked position strictly above its row's `threshold` [B],
    and at least the schedule's count for this step."""
    return torch.maximum((confidence > threshold[:, None]).sum(-1), scheduled)


def select_most_confident(confidence: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Bool [B, S]: the counts[i] most confident positions of row i. Positions that are not
    masks carry confidence -inf, so are never chosen while counts[i] <= masks. Ties go to
    the leftmost position."""
    order = confidence.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return ranks < counts[:, None]


def best_of_runs(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Bool [B, S]: in each row, the most confident position of every run of contiguous
    masked positions (ties to the leftmost)."""
    b, s = masked.shape
    starts = masked & ~F.pad(masked[:, :-1], (1, 0), value=False)
    run = torch.where(masked, starts.cumsum(-1), 0)  # runs are numbered 1..; 0: not masked
    best = confidence.new_full((b, s + 1), -torch.inf).scatter_reduce(
        1, run, confidence, "amax")
    is_best = masked & (confidence == best.gather(1, run))
    index = torch.arange(s, device=masked.device).expand(b, s)
    first = torch.full((b, s + 1), s, device=masked.device).scatter_reduce(
        1, run, torch.where(is_best, index, s), "amin")
    return is_best & (index == first.gather(1, run))


@dataclass
class Prediction:
    """One iteration's model output over each row's block: the logits [B, S, V] (torch
    path), or the fused LM head's tokens and confidences [B, S] (kernel path,
    dinfer_engine/decoding/prediction.py), confidence -inf where the position is not masked."""

    logits: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    confidence: torch.Tensor | None = None
    # kernel path: the final hidden states [B, S, d] and the (rank's) LM head weight, from
    # which rows that need their logits (constrained rows) project them
    hidden: torch.Tensor | None = None
    head: torch.Tensor | None = None
    # float64 log-sum-exp of `logits` per position [B, S], once Decoder.predict has
    # computed it (constrained rows' confidences reuse it)
    log_normaliser: torch.Tensor | None = None

    def logits_at(self, rows: torch.Tensor | int, columns: torch.Tensor | slice = slice(None)
                  ) -> torch.Tensor:
        """The logits (this rank's vocabulary slice) at some positions: one row's [S, V]
        (a view of the logits), or [N, V] at N (row, block column) pairs."""
        if self.logits is not None:
            return self.logits[rows, columns]
        if self.hidden is None or self.head is None:
            raise RuntimeError("a prediction holds logits or hidden states")
        return F.linear(self.hidden[rows, columns], self.head)

    @property
    def width(self) -> int:
        """The vocabulary this rank's logits span."""
        held = self.logits if self.logits is not None else self.head
        if held is None:
            raise RuntimeError("a prediction holds logits or hidden states")
        return held.shape[-1] if held is self.logits else held.shape[0]

    def require_logits(self) -> torch.Tensor:
        """The logits, which a strategy that `needs_logits` always gets."""
        if self.logits is None:
            raise RuntimeError("the fused LM head returned no logits; this step needs them "
                               "(Strategies.needs_logits)")
        return self.logits

    def chosen(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The fused LM head's tokens and confidences."""
        if self.tokens is None or self.confidence is None:
            raise RuntimeError("a prediction holds logits or the fused head's choice")
        return self.tokens, self.confidence


class Decoder:
    """Shared by the decoders: predicting with the request's sampling settings, then
    `commit` picks positions from the confidences. needs_logits: the decoder reads the
    logits themselves (not just the chosen tokens), so it cannot use the fused head."""

    needs_logits = False

    def __init__(self, config: ResolvedConfig) -> None:
        self.config = config

    def setup(self, batch: RunningBatch) -> None:
        """Register per-row state before rows join; stateless decoders have none."""

    def choose(self, prediction: Prediction, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted tokens [B, S] and the bool [B, S] of masked positions to commit."""
        tokens, confidence = self.predict(prediction, masked, batch)
        return tokens, self.commit(confidence, masked, threshold, batch) & masked

    def predict(self, prediction: Prediction, masked: torch.Tensor,
                batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """sample()'s tokens and confidences, -inf where the position is not masked (the
        fused head has already chosen when there are no logits)."""
        if prediction.logits is None:
            return prediction.chosen()
        config = self.config
        tokens, confidence, prediction.log_normaliser = sample_scored(
            prediction.logits, config.temperature, [r.generator for r in batch.requests],
            batch.mask_id, config.top_k, config.top_p, batch.state.get(MIN_P))
        return tokens, torch.where(masked, confidence, -torch.inf)

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        raise NotImplementedError

    def predicted_positions(self, masked: torch.Tensor, batch: RunningBatch) -> torch.Tensor:
        """Bool [B, S]: the block positions whose prediction the decoder reads (the fused
        head projects only these): the masked ones."""
        return masked

    def block_done(self, masked: torch.Tensor, commit: torch.Tensor,
                   batch: RunningBatch) -> torch.Tensor:
        """Bool [B]: rows whose block is finished after writing `commit`: no mask left."""
        return ~(masked & ~commit).any(-1)

    def editable_from(self, batch: RunningBatch) -> torch.Tensor | None:
        """Per row [B], the answer index from which written tokens may still change (early
        stop waits for a stop token before it); None: written tokens are final."""
        return None


class FixedDecoder(Decoder):
    """LLaDA: at a block's k-th iteration, commit the linear_schedule(k) most confident
    masked positions (steps / blocks iterations per block), or what the row's canvas
    schedules for its block instead (an infill canvas: dllm's MDLM schedule of the
    block's masks)."""

    def setup(self, batch: RunningBatch) -> None:
        self.schedule = linear_schedule(self.config.block_length,
                                        self.config.steps_per_block).to(batch.device)

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        counts = batch.canvas.scheduled(batch, masked, self.schedule[batch.step])
        return select_most_confident(confidence, counts)


class ThresholdDecoder(Decoder):
    """Fast-dLLM: commit every masked position whose confidence is >= threshold, and at
    least the most confident one."""

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        return select_most_confident(confidence, threshold_counts(confidence, threshold))


class BlockThresholdDecoder(FixedDecoder):
    """LLaDA2's threshold rule, the "threshold" decoder of block-diffusion families: every
    masked position strictly above threshold, and at least the fixed schedule's count."""

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        counts = block_threshold_counts(confidence, threshold, self.schedule[batch.step])
        return select_most_confident(confidence, counts)


class HierarchicalDecoder(Decoder):
    """dInfer's hierarchical decoding: split the row's masked block positions into runs of
    contiguous positions; in each run commit the most confident position if its confidence
    exceeds low_threshold; also commit every position at or above threshold, and always
    at least the row's most confident position. Separate runs decide separately, so a
    block whose committed tokens cut it into pieces fills the pieces in parallel."""

    def commit(self, confidence: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor,
               batch: RunningBatch) -> torch.Tensor:
        runs = best_of_runs(confidence, masked) & (confidence > self.config.low_threshold)
        sure = confidence >= threshold[:, None]
        top = select_most_confident(confidence, torch.ones_like(batch.step))
        return runs | sure | top


class CreditDecoder(ThresholdDecoder):
    """dInfer's credit decoding. Per row and block, every position holds a credit for
    each token: at each iteration all credits decay by BETA, and a still-masked position's
    current top token p (greedy, as sample() at temperature 0 predicts it) gains p**GAMMA.
    The threshold rule then runs on logits + ALPHA * log(1 + credit) (float64), so tokens
    that stayed on top across iterations commit sooner. Credits are reset when the row
    starts a block and leave with the row.

    A position changes its top token at most once per iteration and stays masked at most
    block_length iterations, so its credits live in block_length (token, value) slots
    instead of a [block_length, vocabulary] table; the arithmetic is the same."""

    ALPHA, BETA, GAMMA = 0.7, 0.8, 0.2
    needs_logits = True

    def setup(self, batch: RunningBatch) -> None:
        slots = (batch.block_length, batch.block_length)
        batch.add_state("credit_tokens", slots, torch.long)
        batch.add_state("credit_values", slots, torch.float64)
        batch.add_state("credit_used", slots[:1], torch.long)

    def predict(self, prediction: Prediction, masked: torch.Tensor,
                batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = prediction.require_logits()
        tokens, values = self.credit(logits, masked, batch)
        fused = vocab.scatter_add(logits.to(torch.float64), tokens,
                                  self.ALPHA * torch.log1p(values))
        return super().predict(Prediction(logits=fused), masked, batch)
    def credit(self, logits: torch.Tensor, masked: torch.Tensor,
               batch: RunningBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Update the rows' credits with this iteration's top tokens; returns the slots'
        tokens and values [B, S, block_length] (unused slots hold value 0)."""
        tokens, values = batch.state["credit_tokens"], batch.state["credit_values"]
        used = batch.state["credit_used"]
        starting = batch.step == 0
        for state in (tokens, values, used):
            state[starting] = 0
        top, p = sample(logits, 0.0, [], batch.mask_id)
        slot_ids = torch.arange(tokens.shape[-1], device=tokens.device)
        match = (tokens == top[..., None]) & (slot_ids < used[..., None])
        found = match.any(-1)
        slot = torch.where(found, match.to(torch.long).argmax(-1), used)
        slot = torch.where(masked, slot, 0)[..., None]  # unmasked: adds 0 to slot 0
        values.mul_(self.BETA)
        values.scatter_add_(-1, slot, torch.where(masked, p ** self.GAMMA, 0)[..., None])
        tokens.scatter_(-1, slot, torch.where(masked[..., None], top[..., None],
                                              tokens.gather(-1, slot)))
        used += masked & ~found
        return tokens, values

