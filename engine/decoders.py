"""Choosing tokens and which of them to commit, per iteration, over each row's block."""

from __future__ import annotations

import torch


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
    hold one float64 copy of the logits, not two."""
    logits = logits.to(torch.float64, copy=True)
    log_normaliser = torch.logsumexp(logits, dim=-1)  # before the ban: LLaDA's softmax
    logits[..., banned] = -torch.inf
    if temperature == 0:  # the argmax is always among the tokens top_k / top_p keep
        tokens = logits.argmax(-1)
    else:
        keep_top(logits, temperature, top_k, top_p)
        noise = torch.stack([
            torch.rand(logits.shape[1:], generator=g, dtype=torch.float64,
                       device=logits.device)
            for g in generators
        ])
        # argmax of exp(logits) / (-log u) ** temperature, LLaDA's add_gumbel_noise
        tokens = (logits - temperature * torch.log(-torch.log(noise))).argmax(-1)
    chosen = logits.gather(-1, tokens[..., None]).squeeze(-1)
    return tokens, torch.exp(chosen - log_normaliser)


def keep_top(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> None:
    """Set to -inf, in place, every logit outside the top_k largest (0: no limit) and then
    outside the nucleus: the fewest most likely tokens of softmax(logits / temperature)
    whose probabilities reach top_p (the most likely token always stays). Works along the
    last dimension only, so each position of each row is filtered on its own."""
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits.masked_fill_(logits < kth, -torch.inf)
    if top_p < 1:
        probs, order = torch.softmax(logits / temperature, dim=-1).sort(-1, descending=True)
        before = probs.cumsum(-1) - probs  # probability of the more likely tokens
        logits.masked_fill_(torch.zeros_like(before, dtype=torch.bool)
                            .scatter_(-1, order, before >= top_p), -torch.inf)


def threshold_counts(confidence: torch.Tensor, threshold: float) -> torch.Tensor:
    """Fast-dLLM: every masked position at or above `threshold`, and at least one."""
    return (confidence >= threshold).sum(-1).clamp(min=1)


def block_threshold_counts(confidence: torch.Tensor, threshold: float,
                           scheduled: torch.Tensor) -> torch.Tensor:
    """LLaDA2's generate: every masked position strictly above `threshold`, and at least
    the schedule's count for this step."""
    return torch.maximum((confidence > threshold).sum(-1), scheduled)


def select_most_confident(confidence: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Bool [B, S]: the counts[i] most confident positions of row i. Positions that are not
    masks carry confidence -inf, so are never chosen while counts[i] <= masks. Ties go to
    the leftmost position."""
    order = confidence.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return ranks < counts[:, None]
