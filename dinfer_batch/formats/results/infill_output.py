"""What an infill line's result looks like (docs/infill.md): the sample stored with the
item, and the fields its OpenAI `text_completion` gets. `text` is the middle (several
gaps: their texts joined in order), each choice lists its gaps' texts in `gaps`, and the
line's `metrics.infill` gives, per choice, the gaps' lengths decoded and, with a length
search, every candidate length with its mean log-probability."""

from __future__ import annotations

import math
from typing import Any

from dinfer_batch.formats.results.logprobs import token_logprobs


def infill_sample(result: Any, stops: list[str], tokenizer: Any) -> dict[str, Any]:
    """One sample of an infill result (dinfer_engine.GenerationResult with `gaps`): each gap cut
    at the first of the line's stop strings in it."""
    gaps, cut_at = [], None
    for gap in result.gaps:
        cuts = [gap.find(stop) for stop in stops if stop in gap]
        if cuts:
            cut_at = min(cuts) if cut_at is None else cut_at
            gap = gap[:min(cuts)]
        gaps.append(gap)
    sample: dict[str, Any] = {
        "text": "".join(gaps), "finish_reason": "stop" if cut_at is not None
        else result.finish_reason, "completion_tokens": result.completion_tokens,
        "nfe": result.nfe, "latency_s": result.seconds, "gaps": gaps, "spans": result.spans}
    if result.length_search is not None:
        sample["length_search"] = [{"length": length, "mean_logprob": _finite(score)}
                                   for length, score in result.length_search]
    # a stop string cuts the log-probabilities of a one-gap answer where it cut the text;
    # several gaps keep every gap token's
    logprobs = token_logprobs(result, tokenizer, cut_at if len(gaps) == 1 else None)
    return sample if logprobs is None else sample | {"logprobs": logprobs}


def choice_fields(sample: dict[str, Any]) -> dict[str, Any]:
    return {"gaps": sample["gaps"]} if "gaps" in sample else {}


def metrics_fields(samples: list[dict[str, Any]]) -> dict[str, Any]:
    if not any("gaps" in sample for sample in samples):
        return {}
    return {"infill": [{"spans": sample.get("spans"),
                        "length_search": sample.get("length_search")} for sample in samples]}


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
