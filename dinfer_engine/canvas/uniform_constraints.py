"""Structured outputs on uniform-noise canvases (DiffusionGemma,
docs/adr/043-structured-outputs-on-uniform-noise.md): the constraint enters where a
canvas commits, not while it denoises.

A canvas denoises as transformers' does, its samples, renoising and stopping rule
untouched (dinfer_engine/canvas/uniform.py); whatever it holds meanwhile is never part of
the answer. When it is done, a constrained row commits, instead of its argmax, the
argmax's witness (dinfer_engine/constraints/witness.py, as for masked blocks): the argmax
checked token by token with the row's matcher, and where a token fails, the best token
the grammar allows by the canvas's last logits; a stop token only where the text is
complete, only stop tokens after it; and the room bound, so the answer can still be
completed and stopped within gen_length. The matcher then moves past the committed
tokens, which the encoder caches, so the next canvas denoises after valid text and is
checked from the matcher's state. An answer is valid by construction: "stop" answers
match, "length" answers are valid prefixes.

The last logits are gone once the step has read them (it works in place), so a
constrained row keeps, at every step, the ids of its `TOP_CANDIDATES` best tokens per
position (`observe`), the only scores the witness reads. An allowed token outside them
(rare where the model follows the format; the rule a random model meets) is the
shortest allowed. Rows without a constraint are never read nor changed, so they stay
bit-identical to transformers' generate; a constrained row's choices depend on its
own logits only, so on no neighbour."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from dinfer_engine.batch import Request
from dinfer_engine.constraints.witness import RowWitness
from dinfer_engine.parallel import vocab

TOP_CANDIDATES = 64  # a position's best tokens kept for the witness's choices


class CommittedCanvases:
    """The constrained rows of one run of the uniform-noise loop: their witnesses, and
    their canvases' latest candidates. `gen_length`: the answer's columns; `vocab_size`:
    the logits' whole vocabulary."""

    def __init__(self, gen_length: int, vocab_size: int) -> None:
        self.gen_length = gen_length
        self.top = min(TOP_CANDIDATES, vocab_size)
        self._witnesses: dict[int, RowWitness] = {}  # by id(request)
        self._candidates: dict[int, np.ndarray] = {}  # by id(request): ids [L, top]

    def observe(self, requests: Sequence[Request], logits: torch.Tensor) -> None:
        """Keep each constrained row's best token ids per position from this step's
        logits [B, L, V] (row b: requests[b]'s), before the step overwrites them."""
        for b, request in enumerate(requests):
            if request.constraint is not None:
                _, ids = vocab.topk(logits[b], self.top)  # a view: no copy of the row
                self._candidates[id(request)] = ids.cpu().numpy()

    def commit(self, request: Request, argmax: torch.Tensor, answered: int) -> torch.Tensor:
        """The tokens a done canvas commits: its `argmax` [L] for a free row; for a
        constrained one the argmax's witness over the answer's columns (`answered`
        committed before it), the matcher moved past it. Columns past gen_length keep
        the argmax (the answer drops them)."""
        grammar = request.constraint
        if grammar is None:
            return argmax
        key = id(request)
        witness = self._witnesses.get(key)
        if witness is None:
            witness = self._witnesses[key] = RowWitness(grammar)
        candidates = self._candidates.pop(key)
        slots = max(0, min(len(argmax), self.gen_length - answered))
        shortest = grammar.vocabulary.shortest

        def best(i: int, allowed: np.ndarray) -> int:
            ranked = candidates[i]
            hits = np.flatnonzero(allowed[ranked])
            if len(hits):
                return int(ranked[hits[0]])
            return int(shortest(allowed, 1)[0])

        found = witness.search([None] * slots, argmax[:slots].tolist(), best,
                               self.gen_length - answered - slots)
        witness.advance(found)
        if witness.tail is witness.stops or answered + len(argmax) >= self.gen_length:
            del self._witnesses[key]  # the row ends with this canvas
        tokens = argmax.clone()
        tokens[:slots] = torch.tensor(found, dtype=tokens.dtype, device=tokens.device)
        return tokens
