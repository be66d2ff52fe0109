"""What one request costs, in generations: the unit quotas count, fair share charges and
chunks are cut by (docs/service.md#what-a-request-costs, docs/adr/026-request-cost.md).

A generation is one decode of an ordinary answer of the line's length (max_tokens, or
the model's default, rounded up to the whole blocks its canvas decodes: ADR 059): a plain
line of `n` samples costs `n`; the canvas's tokens count in the owner's token quota
(jobs/intake/line_check.py). Two things make one line
ask for more forwards than that, and count:

- its canvas: an infill line decodes one row per length candidate (`infill_lengths`),
  each row as many masked positions as its gaps hold; every decoder commits at least
  one token a forward, so a row costs ceil(its masked positions / the answer length)
  generations, and a line its rows' sum (`n x candidates` when no gap is longer than
  max_tokens);
- the editing decoder's post-steps: once a block has no mask left, up to
  `max_post_steps` more forwards edit it, on top of the block's at most
  ceil(block_length / num_to_transfer) mask forwards; so each generation costs
  1 + ceil(max_post_steps / ceil(block_length / num_to_transfer)) (blocks x
  max_post_steps post-steps beside blocks x the mask forwards).

    cost = prompts x draws x sum over rows of ceil(masked positions / answer length)
           x editing factor

where draws is `best_of`, else `n`, and prompts the length of a completions line's list
of prompts (formats/lines/prompts.py).

The figure is a bound on forwards, not the forwards a line will take (the engine's `nfe`,
shown beside it in the line's metrics): a model that stops editing early spends less."""

from __future__ import annotations

from typing import Any

from dinfer_batch.formats.lines import infill
from dinfer_batch.formats.lines.prompts import row_count
from dinfer_engine.choices import DECODERS


def request_cost(request: dict[str, Any], params: dict[str, Any], config: Any) -> int:
    """The request's cost in generations. `params`: its effective parameters (the job's
    under the line's); `config`: the engine's resolved configuration for them (gen_length,
    block_length, decoder, max_post_steps, num_to_transfer)."""
    answer = config.gen_length
    rows = [answer]
    if "suffix" in request:
        rows = [sum(spans) for spans in infill.canvas(request, params).span_sets(answer)]
    canvases = sum(-(-masked // answer) for masked in rows)
    return row_count(request, params) * canvases * editing_factor(config)


def editing_factor(config: Any) -> int:
    """1, or for a decoder that rewrites committed tokens (the editing decoder) 1 + its
    post-steps per block over its mask forwards per block (rounded up)."""
    if not DECODERS[config.decoder].rewrites or config.max_post_steps == 0:
        return 1
    mask_forwards = -(-config.block_length // config.num_to_transfer)
    return 1 + -(-config.max_post_steps // mask_forwards)
