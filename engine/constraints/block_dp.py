"""The most probable completion of a block that an automaton accepts (DINGO's dynamic
programme over (position in the block, automaton state)).

Each row's block has S positions: committed ones hold their token, masked ones may take
any token; inactive positions (outside the answer: the prompt a block-diffusion block
starts in, columns past the answer's end) are skipped. Starting from the row's state,
best[i][q] is the highest total score of tokens for positions < i that lead to state q;
at the end the best state among those allowed wins (`end_ok`, else `fallback`), and the
tokens are read back. Scores add per position, so the completion maximises the sum of
its tokens' scores: log-probabilities, or logits, which differ from them by a constant
per position (with Gumbel noise: a sample). Rows are independent, so a row's
completion does not depend on the others'."""

from __future__ import annotations

import torch

from engine.constraints.automaton import TokenAutomaton


def best_completion(automaton: TokenAutomaton, scores: torch.Tensor, fixed: torch.Tensor,
                    active: torch.Tensor, start: torch.Tensor, end_ok: torch.Tensor,
                    fallback: torch.Tensor) -> torch.Tensor:
    """Tokens [R, S] of each row's best completion (the committed token where `fixed`
    [R, S] >= 0; -1 at inactive positions). scores [R, S, V] float; active [R, S] bool;
    start [R] states; end_ok / fallback [R, states] bool: the states the block may end
    in, the fallback used only by rows that cannot reach any of end_ok. RuntimeError if
    a row can reach neither."""
    a = automaton.to(scores.device)
    rows, length, _ = scores.shape
    states, pairs, entries = a.states, a.src.numel(), a.set_tokens.numel()
    device = scores.device
    best = scores.new_full((rows, states), -torch.inf)
    best[torch.arange(rows, device=device), start] = 0
    entry_of_set = a.set_of_entry.expand(rows, -1)
    dst = a.dst.expand(rows, -1)
    entry_ids = torch.arange(entries, device=device).expand(rows, -1)
    pair_ids = torch.arange(pairs, device=device).expand(rows, -1)
    back, chosen = [], []
    for i in range(length):
        position = scores[:, i]
        if (fixed[:, i] >= 0).any():  # a committed token: score 0 for it, -inf for others
            one_hot = torch.full_like(position, -torch.inf).scatter_(
                1, fixed[:, i:i + 1].clamp(min=0), 0.0)
            position = torch.where((fixed[:, i] >= 0)[:, None], one_hot, position)
        entry_scores = position[:, a.set_tokens]  # [R, N]
        set_best = scores.new_full((rows, a.sets), -torch.inf).scatter_reduce(
            1, entry_of_set, entry_scores, "amax")
        top = (entry_scores == set_best.gather(1, entry_of_set)) & entry_scores.isfinite()
        first = torch.full((rows, a.sets), entries, device=device).scatter_reduce(
            1, entry_of_set, torch.where(top, entry_ids, entries), "amin")
        chosen.append(a.set_tokens[first.clamp(max=max(entries - 1, 0))])  # [R, sets]
        through = best[:, a.src] + set_best[:, a.pair_set]  # [R, P]
        after = scores.new_full((rows, states), -torch.inf).scatter_reduce(
            1, dst, through, "amax")
        winner = (through == after.gather(1, dst)) & through.isfinite()
        back.append(torch.full((rows, states), pairs, device=device).scatter_reduce(
            1, dst, torch.where(winner, pair_ids, pairs), "amin"))
        best = torch.where(active[:, i, None], after, best)
    ends = torch.where(end_ok, best, -torch.inf)
    ends = torch.where(ends.isfinite().any(-1, keepdim=True), ends,
                       torch.where(fallback, best, -torch.inf))
    if not ends.isfinite().any(-1).all():
        raise RuntimeError("a constrained row has no completion its automaton accepts")
    return _read_back(a, ends.argmax(-1), back, chosen, fixed, active)


def _read_back(a: TokenAutomaton, end: torch.Tensor, back: list[torch.Tensor],
               chosen: list[torch.Tensor], fixed: torch.Tensor,
               active: torch.Tensor) -> torch.Tensor:
    """Follow the winning pairs from each row's end state back to its start."""
    rows, length = fixed.shape
    pairs_back = torch.stack(back, 1).cpu().tolist() if back else []  # [R, S, states]
    tokens_of_set = torch.stack(chosen, 1).cpu().tolist() if chosen else []
    src, pair_set = a.src.cpu().tolist(), a.pair_set.cpu().tolist()
    is_active, end_state = active.cpu().tolist(), end.cpu().tolist()
    out = [[-1] * length for _ in range(rows)]
    for r in range(rows):
        state = end_state[r]
        for i in reversed(range(length)):
            if not is_active[r][i]:
                continue
            pair = pairs_back[r][i][state]
            out[r][i] = tokens_of_set[r][i][pair_set[pair]]
            state = src[pair]
    return torch.tensor(out, dtype=torch.long, device=fixed.device)
