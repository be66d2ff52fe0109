"""Training batches: deterministic for (seed, step), never holding a held-out example.

A batch is of one kind (MIXES), drawn per step with the --mix shares:
- `short`: the four short tasks, 24-token answer regions (stage 1's batches);
- `long`: half `count`, half short tasks, 64-token regions (short answers also learn to
  fill long regions with EOS);
- `json`: the JSON tasks and a share of short tasks, 48-token regions;
- `infill`: infill canvases (prompt, span, suffix), each row with its own span.
Completion rows are prompt, answer, then EOS to the batch's end, all after the prompt
being the answer region (as in LLaDA's SFT). Infill rows are prompt, middle, EOS to the
span's end, suffix, then padding that the attention mask hides; only the span is the
answer region.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from dinfer_training.tasks import ANSWER_REGION, TRAINING_MAKERS, Example

SHORT_WEIGHTS = {"add": 0.35, "sort": 0.1, "rev": 0.3, "code": 0.25}
MIXES: dict[str, dict[str, float]] = {
    "short": SHORT_WEIGHTS,
    "long": {**{task: w / 2 for task, w in SHORT_WEIGHTS.items()}, "count": 0.5},
    "json": {**{task: w * 0.25 for task, w in SHORT_WEIGHTS.items()},
             "json_add": 0.4, "json_rev": 0.25, "json_sort": 0.1},
    "infill": {"infill": 1.0},
}


@dataclass
class Batch:
    ids: torch.Tensor  # [B, L] token ids
    region: torch.Tensor  # [B, L] bool: the answer region (masked, corrupted, scored)
    keys: torch.Tensor | None  # [B, L] bool attention key mask, None when all attend
    kind: str


def parse_mix(text: str) -> dict[str, float]:
    """`short=0.3,long=0.2,json=0.25,infill=0.25` -> shares (any positive weights)."""
    shares: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name not in MIXES:
            raise ValueError(f"--mix: unknown batch kind {name!r}; kinds: {', '.join(MIXES)}")
        try:
            shares[name] = float(value)
        except ValueError:
            raise ValueError(f"--mix: {part!r} is not KIND=WEIGHT") from None
        if shares[name] < 0:
            raise ValueError(f"--mix: weight of {name} is negative")
    if not sum(shares.values()) > 0:
        raise ValueError("--mix: the weights sum to zero")
    return shares


def draw(rng: random.Random, mix: dict[str, float], size: int,
         held_out: set[str]) -> list[Example]:
    tasks, weights = list(mix), list(mix.values())
    rows: list[Example] = []
    while len(rows) < size:
        ex = TRAINING_MAKERS[rng.choices(tasks, weights)[0]](rng)
        if ex.key not in held_out:
            rows.append(ex)
    return rows


def make_batch(step: int, seed: int, size: int, tok: dict[str, int], held_out: set[str],
               pad_id: int, eos_id: int, shares: dict[str, float]) -> Batch:
    rng = random.Random(seed * 1_000_003 + step)
    kind = rng.choices(list(shares), list(shares.values()))[0]
    rows = draw(rng, MIXES[kind], size, held_out)
    encode = lambda text: [tok[c] for c in text]  # noqa: E731
    if kind != "infill":
        region_length = max(ANSWER_REGION[task] for task in MIXES[kind])
        length = max(len(ex.prompt) for ex in rows) + region_length
        ids = torch.full((size, length), eos_id, dtype=torch.long)
        region = torch.zeros(size, length, dtype=torch.bool)
        for i, ex in enumerate(rows):
            prompt, answer = encode(ex.prompt), encode(ex.answer)
            ids[i, :len(prompt) + len(answer)] = torch.tensor(prompt + answer)
            region[i, len(prompt):] = True
        return Batch(ids, region, None, kind)
    length = max(len(ex.prompt) + ex.span + len(ex.suffix) for ex in rows)
    ids = torch.full((size, length), pad_id, dtype=torch.long)
    region = torch.zeros(size, length, dtype=torch.bool)
    keys = torch.zeros(size, length, dtype=torch.bool)
    for i, ex in enumerate(rows):
        span = encode(ex.answer) + [eos_id] * (ex.span - len(ex.answer))
        row = encode(ex.prompt) + span + encode(ex.suffix)
        ids[i, :len(row)] = torch.tensor(row)
        region[i, len(ex.prompt):len(ex.prompt) + ex.span] = True
        keys[i, :len(row)] = True
    return Batch(ids, region, keys, kind)
