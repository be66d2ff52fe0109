"""Completions' `prompt` in each shape OpenAI takes (a string, a list of strings, token
ids, a list of token-id lists), and a line's rows: each prompt drawn `best_of` times
(else `n`), the best `n` of each kept, as choices indexed `prompt_index * n + sample`
(docs/adr/059-any-maximum-and-the-jobs-endpoint.md).

A normalised request keeps its first prompt as `prompt` (what the prefix order, the
context check and a single-prompt line read) and, for a list of several, all of them as
`prompts`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dinfer_batch.formats.limits import MAX_INT, InvalidParam, shown
from dinfer_batch.formats.parameters.params import sample_seeds

MAX_PROMPTS = 128  # prompts one completions line may list (each a row per sample)
Prompt = str | list[int]


def parse_prompt(value: Any) -> dict[str, Any]:
    """The request fields of a completions `prompt`: {"prompt": first} and, for a list
    of several, {"prompts": [...]}; InvalidParam naming what was expected."""
    if _ids(value):
        return {"prompt": value}
    if isinstance(value, list) and 0 < len(value) <= MAX_PROMPTS and (
            all(_ids(p) for p in value) or all(isinstance(p, str) and p for p in value)):
        return {"prompt": value[0]} | ({"prompts": value} if len(value) > 1 else {})
    if isinstance(value, str):
        if not value:
            raise InvalidParam(f"prompt must be a non-empty string, got {shown(value)}")
        return {"prompt": value}
    raise InvalidParam(f"prompt must be a non-empty string, a list of token ids, or a list "
                       f"of 1 to {MAX_PROMPTS} strings or of 1 to {MAX_PROMPTS} token-id "
                       f"lists, got {shown(value)}")


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_INT for t in value)


def prompts_of(request: dict[str, Any]) -> list[Prompt]:
    """A completions request's prompts (one for a single prompt)."""
    return request.get("prompts") or [request["prompt"]]


def prompt_count(request: dict[str, Any]) -> int:
    return len(request.get("prompts") or (None,))


def draws(params: dict[str, Any]) -> int:
    """The samples drawn per prompt: best_of, else n. ValueError when best_of < n."""
    n, best_of = params.get("n") or 1, params.get("best_of")
    if best_of is None:
        return int(n)
    if best_of < n:
        raise ValueError(f"best_of={best_of} must be at least n={n} (best_of samples are "
                         "drawn, the best n returned)")
    return int(best_of)


def row_count(request: dict[str, Any], params: dict[str, Any]) -> int:
    """The engine rows one line decodes: its prompts x its draws."""
    return prompt_count(request) * draws(params)


def row_seeds(request: dict[str, Any], params: dict[str, Any], seed_base: int,
              line: int) -> list[int]:
    """Each row's seed, prompt by prompt: every prompt's draws take the seeds one prompt
    alone would (seed, seed + 1, ...), so a list answers as its prompts would line by
    line with the same seed."""
    seeds = sample_seeds(params | {"n": draws(params)}, seed_base, line)
    return seeds * prompt_count(request)


def choice_seeds(request: dict[str, Any], params: dict[str, Any], seed_base: int,
                 line: int, samples: Sequence[dict[str, Any]]) -> list[int]:
    """The seed of each choice: its row's; a best_of choice names its draw."""
    seeds = sample_seeds(params | {"n": draws(params)}, seed_base, line)
    if samples and "draw" in samples[0]:
        return [seeds[sample["draw"]] for sample in samples]
    return seeds[:params.get("n") or 1] * prompt_count(request)


def kept(scores: Sequence[float | None], n: int) -> list[int]:
    """Of one prompt's draws (their mean log-probabilities), the indices of the best n,
    best first (ties: the earlier draw), as OpenAI's best_of returns them."""
    def rank(i: int) -> tuple[float, int]:
        score = scores[i]
        return (float("inf") if score is None else -score, i)

    return sorted(range(len(scores)), key=rank)[:n]


def echo_text(prompt: Prompt, tokenizer: Any) -> str:
    """The prompt as text (token ids decoded): what `echo` puts before the answer."""
    if isinstance(prompt, str):
        return prompt
    return str(tokenizer.decode(prompt))
