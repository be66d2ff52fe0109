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
    sets = SetTables.of(a, scores.shape[-1])
    rows, length, _ = scores.shape
    states, pairs = a.states, a.src.numel()
    device = scores.device
    best = scores.new_full((rows, states), -torch.inf)
    best[torch.arange(rows, device=device), start] = 0
    dst = a.dst.expand(rows, -1)
    pair_ids = torch.arange(pairs, device=device).expand(rows, -1)
    back, chosen = [], []
    for i in range(length):
        set_best, set_token = sets.best(scores[:, i], fixed[:, i])
        chosen.append(set_token)  # [R, sets]
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


class SetTables:
    """Each token set's best token at one position, fast: a set holding at least
    1/LARGE_SHARE of the vocabulary almost always holds one of the position's TOP_K best
    tokens (for random scores; a trained model's best tokens are more alike still), so
    its best is the first of them it holds (exact, read from a membership table); the
    rare miss, and every smaller set, is reduced over its members. A committed
    position's best is 0 for the sets holding its token, -inf elsewhere."""

    TOP_K = 512
    LARGE_SHARE = 64  # a set of 1/64 of the vocabulary misses the top 512 once in 3,000

    def __init__(self, a: TokenAutomaton, vocabulary: int) -> None:
        device = a.set_tokens.device
        self.sets = a.sets
        sizes = torch.bincount(a.set_of_entry, minlength=a.sets)
        self.large = (sizes * self.LARGE_SHARE >= vocabulary).nonzero().squeeze(1)
        self.member = torch.zeros(a.sets, vocabulary, dtype=torch.bool, device=device)
        self.member[a.set_of_entry, a.set_tokens] = True
        self.member_large = self.member[self.large]
        small = ~torch.isin(a.set_of_entry, self.large)
        self.small_tokens, self.small_set = a.set_tokens[small], a.set_of_entry[small]
        self.large_members = [a.set_tokens[a.set_of_entry == s] for s in self.large.tolist()]

    @classmethod
    def of(cls, a: TokenAutomaton, vocabulary: int) -> SetTables:
        key = f"sets:{vocabulary}"
        if key not in a._on:
            a._on[key] = cls(a, vocabulary)
        tables: SetTables = a._on[key]
        return tables

    def best(self, scores: torch.Tensor, fixed: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row [R] and set: the best score over the set's tokens at this position
        (scores [R, V]; fixed [R]: the committed token or -1) and that token."""
        rows = scores.shape[0]
        best = scores.new_full((rows, self.sets), -torch.inf)
        token = torch.zeros(rows, self.sets, dtype=torch.long, device=scores.device)
        self._reduce(scores, self.small_tokens, self.small_set, best, token)
        if len(self.large):
            values, ids = scores.topk(min(self.TOP_K, scores.shape[-1]), dim=-1)  # [R, K]
            held = self.member_large[:, ids].permute(1, 0, 2)  # [R, L, K]
            first = held.to(torch.uint8).argmax(-1)  # [R, L]
            best[:, self.large] = torch.where(held.any(-1), values.gather(1, first),
                                              -torch.inf)
            token[:, self.large] = ids.gather(1, first)
            for r, s in (~held.any(-1)).nonzero().tolist():  # rare: none of the top K
                members, column = self.large_members[s], int(self.large[s])
                self._reduce(scores[r:r + 1], members, torch.zeros_like(members),
                             best[r:r + 1, column:column + 1],
                             token[r:r + 1, column:column + 1])
        committed = fixed >= 0
        if committed.any():
            holds = self.member[:, fixed.clamp(min=0)].T  # [R, sets]
            best = torch.where(committed[:, None], torch.where(holds, 0.0, -torch.inf), best)
            token = torch.where(committed[:, None], fixed[:, None], token)
        return best, token

    @staticmethod
    def _reduce(scores: torch.Tensor, tokens: torch.Tensor, set_of: torch.Tensor,
                best: torch.Tensor, token: torch.Tensor) -> None:
        """best[r, s] / token[r, s] over the listed (token, set) entries, in place."""
        if not len(tokens):
            return
        rows = scores.shape[0]
        values = scores.index_select(1, tokens)
        index = set_of.expand(rows, -1)
        best.scatter_reduce_(1, index, values, "amax")
        top = (values == best.gather(1, index)) & values.isfinite()
        entries = len(tokens)
        first = torch.full_like(token, entries).scatter_reduce(
            1, index, torch.where(top, torch.arange(entries, device=scores.device), entries),
            "amin")
        token.copy_(torch.where(first < entries, tokens[first.clamp(max=entries - 1)], token))


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
