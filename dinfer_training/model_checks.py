"""Model-level checks of the capabilities demo v3 was trained for, written directly on
the model's forward (no engine feature needed), to monitor training and to compare
models in benchmarks/demo_eval.py:

- infill: the engine's infill canvas (prompt tokens, a span of masked positions, suffix
  tokens) decoded in one block by confidence: every masked position whose top
  probability reaches `threshold` is committed, at least the most confident one per
  forward; the middle is the span's tokens before the first EOS.
- repair: held-out answers with a few tokens replaced by random ones, no masks; one
  forward. A corrupted position counts as repaired when the model's top token there is
  the original one, and as confidently repaired when its probability also reaches the
  threshold; at clean positions, the share whose top token is another one with that
  confidence (an editing decoder would wrongly replace them).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dinfer_training.example import Example
from dinfer_training.tasks import answer_region

Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class Special:
    pad: int
    eos: int
    mask: int
    vocab_size: int


@torch.no_grad()
def decode_infill(model: torch.nn.Module, encode: Encode, special: Special,
                  examples: Sequence[Example], threshold: float = 0.9,
                  batch_size: int = 64) -> list[tuple[list[int], int]]:
    """Per example, the span's token ids as decoded and the forwards it took."""
    out: list[tuple[list[int], int]] = []
    for first in range(0, len(examples), batch_size):
        group = examples[first:first + batch_size]
        rows = [encode(ex.prompt) + [special.mask] * ex.span + encode(ex.suffix) for ex in group]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), special.pad, dtype=torch.long)
        keys = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            keys[i, :len(row)] = True
        forwards = torch.zeros(len(rows), dtype=torch.long)
        while (masked := ids == special.mask).any():
            active = masked.any(dim=1)
            probs = model(ids, attention_mask=keys).logits.float().softmax(-1)
            forwards += active
            confidence, token = probs.max(-1)
            confidence = torch.where(masked, confidence, torch.full_like(confidence, -1.0))
            commit = masked & (confidence >= threshold)
            best = confidence.argmax(dim=1)
            commit[active, best[active]] = True
            ids = torch.where(commit, token, ids)
        for i, ex in enumerate(group):
            start = len(encode(ex.prompt))
            out.append((ids[i, start:start + ex.span].tolist(), int(forwards[i])))
    return out


def infill_scores(model: torch.nn.Module, encode: Encode, decode: Callable[[list[int]], str],
                  special: Special, examples: Sequence[Example],
                  threshold: float = 0.9) -> dict[str, object]:
    """Exact match of the middle (fixed span: each example's own), per source kind
    (`function` or the task the answer came from), forwards per sample and middle tokens
    (with the EOS that ends it) per second."""
    started = time.perf_counter()
    spans = decode_infill(model, encode, special, examples, threshold)
    seconds = time.perf_counter() - started
    by_source: dict[str, list[bool]] = {}
    content = forwards = 0
    for ex, (span, nfe) in zip(examples, spans, strict=True):
        middle = span[:span.index(special.eos)] if special.eos in span else span
        kind = "function" if "\n" in ex.source else ex.source.split(" ")[0]
        kind = {"def": "code"}.get(kind, kind)
        by_source.setdefault(kind, []).append(decode(middle) == ex.answer)
        content += min(len(middle) + 1, len(span))
        forwards += nfe
    every = [hit for hits in by_source.values() for hit in hits]
    return {
        "exact_match": round(sum(every) / len(every), 4),
        "exact_match_by_source": {k: round(sum(v) / len(v), 4)
                                  for k, v in sorted(by_source.items())},
        "samples": len(every), "forwards_per_sample": round(forwards / len(every), 3),
        "content_tpf": round(content / forwards, 3),
        "content_tokens_per_s": round(content / seconds, 1), "threshold": threshold,
    }


@torch.no_grad()
def repair_scores(model: torch.nn.Module, encode: Encode, special: Special,
                  examples: Sequence[Example], corruptions: int = 2, threshold: float = 0.9,
                  seed: int = 0) -> dict[str, object]:
    """Completion examples with `corruptions` random tokens in their answer (answer and
    its first EOS), one forward over the whole region visible."""
    rng = random.Random(seed)
    rows, regions, changed = [], [], []
    for ex in examples:
        prompt, answer = encode(ex.prompt), encode(ex.answer) + [special.eos]
        region = answer + [special.eos] * (answer_region(ex) - len(answer))
        clean = prompt + region
        noisy = list(clean)
        positions = rng.sample(range(len(prompt), len(prompt) + len(answer)),
                               min(corruptions, len(answer)))
        for p in positions:
            choices = [t for t in [special.eos, *range(4, special.vocab_size)] if t != clean[p]]
            noisy[p] = rng.choice(choices)
        rows.append((clean, noisy))
        regions.append((len(prompt), len(clean)))
        changed.append(set(positions))
    width = max(len(c) for c, _ in rows)
    fixed = confident_fixed = total = false_edits = clean_total = restored = 0
    for first in range(0, len(rows), 64):
        part = range(first, min(first + 64, len(rows)))
        ids = torch.full((len(part), width), special.pad, dtype=torch.long)
        keys = torch.zeros(len(part), width, dtype=torch.bool)
        for i, r in enumerate(part):
            ids[i, :len(rows[r][1])] = torch.tensor(rows[r][1])
            keys[i, :len(rows[r][1])] = True
        confidence, top = model(ids, attention_mask=keys).logits.float().softmax(-1).max(-1)
        for i, r in enumerate(part):
            clean = rows[r][0]
            start, end = regions[r]
            row_ok = True
            for p in range(start, end):
                right = int(top[i, p]) == clean[p]
                sure = float(confidence[i, p]) >= threshold
                row_ok &= right
                if p in changed[r]:
                    total += 1
                    fixed += right
                    confident_fixed += right and sure
                else:
                    clean_total += 1
                    false_edits += (not right) and sure
            restored += row_ok
    return {
        "corruptions_per_answer": corruptions, "samples": len(rows), "threshold": threshold,
        "repaired": round(fixed / total, 4),
        "confidently_repaired": round(confident_fixed / total, 4),
        "rows_fully_restored": round(restored / len(rows), 4),
        "confident_false_edits_at_clean_positions": round(false_edits / clean_total, 5),
    }
